"""unstructured without downloads: a blank spaCy pipeline, and PDF support checked up front.

- unstructured 0.27 runs spaCy's `en_core_web_sm` to guess whether a paragraph is narrative
  text, a title or other text, and downloads that model from GitHub when it is missing.
  doc-indexer keeps every paragraph the same way whatever that guess says (headings come from
  Markdown/HTML heading tags, see tasks/parse/document.py), so unstructured's single model
  accessor is handed a blank English pipeline with spaCy's rule-based sentence splitter: no
  model files, no download, the same blocks (checked on data/sample and ../shared/corpus).
- unstructured's HTML parser (Markdown is converted to HTML first) asks of every paragraph
  without a tag-given type whether it "is possibly narrative text" (sentence counts, capital
  ratios, verbs: half of a Markdown file's parsing time) to choose between NarrativeText and
  Text. Both are kept alike here, so the question is answered "yes" at once: same blocks.
  The checks before it (bullets, addresses, e-mail addresses, one-character text) stay.
- `partition_pdf(strategy="fast")` returns `[]` instead of failing when one of its imports is
  missing; `check_pdf_support()` imports them eagerly so a broken install fails loudly.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any


@cache
def sentence_pipeline() -> Any:
    """A blank English spaCy pipeline that only splits sentences, built once per process."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return nlp


def narrative_or_not(text: str, *args: Any, **kwargs: Any) -> bool:
    """unstructured's NarrativeText-or-Text guess, answered at no cost: doc-indexer treats
    both alike (tasks/parse/elements.py)."""
    return True


@contextmanager
def _torch_hidden() -> Iterator[None]:
    """Imports inside see no torch (unless this process has imported it already)."""
    if "torch" in sys.modules:
        yield
        return
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` raises ImportError
    try:
        yield
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]


@cache
def install_unstructured_nlp() -> None:
    """Point unstructured's spaCy accessor at `sentence_pipeline` (no download, ever), and its
    HTML parser's narrative-text guess at `narrative_or_not`."""
    # spaCy's thinc imports torch where it can, for layers a blank sentence splitter never
    # uses: 1.3 s of a parser process's start. A PDF's readers still import torch when needed.
    with _torch_hidden():
        import spacy  # noqa: F401
    import unstructured.nlp.tokenize as unstructured_tokenize

    if not hasattr(unstructured_tokenize, "_get_nlp"):
        raise RuntimeError(
            "unstructured.nlp.tokenize has no _get_nlp(); this unstructured release is not "
            "supported by doc-indexer's offline setup (pinned to unstructured 0.27.x)."
        )
    unstructured_tokenize._get_nlp = sentence_pipeline
    import unstructured.partition.html.parser as html_parser

    if not hasattr(html_parser, "is_possible_narrative_text"):
        raise RuntimeError(
            "unstructured.partition.html.parser has no is_possible_narrative_text(); this "
            "unstructured release is not supported by doc-indexer (pinned to 0.27.x)."
        )
    html_parser.is_possible_narrative_text = narrative_or_not


@cache
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
