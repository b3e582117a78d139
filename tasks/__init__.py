"""Pipeline steps of doc-indexer; importing the package first sets up the offline environment."""

from tasks import offline  # noqa: F401
