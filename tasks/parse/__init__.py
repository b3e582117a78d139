"""Reading documents: a file's bytes → blocks and metadata, through one reader per format."""
