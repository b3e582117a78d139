"""`headings:<spec>`: each chunk is embedded with its heading path in front of its text, the
dataset records it, vectors are reused only for the same heading and text, and a dataset of
the model alone keeps its model."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.core.records import Chunk, sha256_hex
from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import Fingerprint
from tasks.embed.hash_backend import HashEmbedder
from tasks.embed.models import model_info, query_embedder, spec_of_model_id
from tasks.ingest.reuse import keyed_by_input, model_input, texts_to_embed
from tasks.ingest.settings import IngestSettings, resolve_auto_model
from tasks.text.split import SplitSettings

PARAGRAPH = "Run the command with the flag, then check the log for the line it prints."


def _chunk(section: str, text: str = PARAGRAPH) -> Chunk:
    return Chunk("d:chunk:0000", "d", 0, 1, text, 0, len(text), section, 2, None)


def test_the_model_input_is_the_heading_path_then_the_text():
    under, bare = _chunk("Setup > Logging"), _chunk("")
    assert model_input(under, headings=True) == f"Setup > Logging\n\n{PARAGRAPH}"
    assert model_input(under, headings=False) == model_input(bare, headings=True) == PARAGRAPH
    keyed = keyed_by_input((under, bare), headings=True)
    assert keyed[0].text_hash == sha256_hex(f"Setup > Logging\n\n{PARAGRAPH}")
    assert keyed[1].text_hash == sha256_hex(PARAGRAPH) == bare.text_hash
    assert keyed_by_input((under,), headings=False) == (under,)
    assert texts_to_embed(list(keyed), {}, headings=True) == {
        keyed[0].text_hash: f"Setup > Logging\n\n{PARAGRAPH}",
        keyed[1].text_hash: PARAGRAPH,
    }


def test_the_spec_is_recorded_and_read_back():
    info = model_info("headings:hash:16")
    assert (info.model_id, info.dimension, info.headings) == ("headings:hash:16", 16, True)
    assert not model_info("hash:16").headings
    assert spec_of_model_id("headings:hash:16") == "headings:hash:16"
    assert query_embedder("headings:hash:16").info.dimension == 16


def test_a_dataset_keeps_its_headings_model_and_one_without_keeps_its_own(tmp_path):
    for model in ("headings:hash:16", "hash:16"):
        uri = str(tmp_path / model.replace(":", "-"))
        Dataset(uri).prepare(Fingerprint.of(model_info(model), SplitSettings()))
        settings = IngestSettings(source_dir=str(tmp_path), index_uri=uri)
        assert resolve_auto_model(settings).model == model


@pytest.mark.integration
def test_the_same_paragraph_under_two_headings_gets_two_vectors(prefect_backend, tmp_path):
    from flows.ingest import ingest

    docs = tmp_path / "docs"
    docs.mkdir()
    # The same subsection under two chapters: the chunks' own text is the same (a chunk holds
    # its section's heading line, not its parents').
    for name, heading in (("a.md", "Installing packages"), ("b.md", "Removing packages")):
        (docs / name).write_text(f"# {heading}\n\n## Details\n\n{PARAGRAPH}\n", "utf-8")
    embedder = HashEmbedder(64)
    for model in ("headings:hash:64", "hash:64"):
        uri = str(tmp_path / model.replace(":", "-"))
        ingest(source_dir=str(docs), index_uri=uri, model=model)
        rows = Dataset(uri).chunks.to_arrow().to_pylist()
        by_doc = {row["doc_id"]: row for row in rows if row["section"].endswith("> Details")}
        assert set(by_doc) == {"a.md", "b.md"}
        vectors = {doc: np.asarray(row["vector"], np.float32) for doc, row in by_doc.items()}
        if model.startswith("headings:"):
            for row in by_doc.values():
                read = f"{row['section']}\n\n{row['text']}"
                assert row["text_hash"] == sha256_hex(read)
                assert np.allclose(vectors[row["doc_id"]], embedder.encode([read])[0], atol=1e-6)
            assert by_doc["a.md"]["text_hash"] != by_doc["b.md"]["text_hash"]
        else:
            assert by_doc["a.md"]["text_hash"] == by_doc["b.md"]["text_hash"]
            assert np.allclose(vectors["a.md"], vectors["b.md"])

    # A heading edited, the text kept: embedded again under the new heading, not reused.
    uri = str(tmp_path / "headings-hash-64")
    (docs / "b.md").write_text(f"# Upgrading packages\n\n## Details\n\n{PARAGRAPH}\n", "utf-8")
    summary = ingest(source_dir=str(docs), index_uri=uri, model="headings:hash:64")
    assert summary.indexed == 1
    rows = Dataset(uri).chunks.to_arrow().to_pylist()
    row = next(r for r in rows if r["doc_id"] == "b.md" and r["section"].endswith("Details"))
    assert row["section"] == "Upgrading packages > Details"
    expected = embedder.encode([f"Upgrading packages > Details\n\n{row['text']}"])[0]
    assert np.allclose(np.asarray(row["vector"], np.float32), expected, atol=1e-6)
