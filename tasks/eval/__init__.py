"""Retrieval evaluation: judgements and metrics."""
