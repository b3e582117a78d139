"""Prefect deployments of the doc-indexer flows."""
