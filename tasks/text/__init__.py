"""Text processing that needs no model: splitting documents into chunks, full-text analysis."""
