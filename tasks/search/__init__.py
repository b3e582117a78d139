"""Searching a dataset: parameters, filters, vector / full-text / hybrid ranking, snippets."""
