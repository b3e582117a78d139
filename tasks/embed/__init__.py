"""Embedding backends behind one protocol (`tasks.embed.base.Embedder`), chosen by a model spec."""
