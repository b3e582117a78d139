"""The ingest pipeline: discover and plan, load, split, embed, write; and its Prefect tasks."""
