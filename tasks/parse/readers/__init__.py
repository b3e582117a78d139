"""One module per document format (or family of formats), each registering its readers with
tasks/ingest/registry.py, which imports every module here."""
