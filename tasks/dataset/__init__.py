"""The LanceDB dataset: where it lives, its tables and columns, and the one object that opens it."""
