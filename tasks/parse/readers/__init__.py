"""One module per document format (or family of formats), each registering its readers with
tasks/parse/registry.py, which imports every module here."""
