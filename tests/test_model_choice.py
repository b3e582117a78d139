"""Which model an ingest run uses: `--model auto` (the default) keeps an existing dataset's
model, so a dataset built by an older default keeps updating as it was built; a new dataset
gets the default backend; an explicit model is taken as given (and a different one than the
dataset's still asks for --rebuild)."""

from __future__ import annotations

import pytest

from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetError
from tasks.dataset.schema import Fingerprint
from tasks.embed.base import ModelInfo
from tasks.embed.models import BUNDLED_MODEL_ID, DEFAULT_MODEL
from tasks.ingest.settings import AUTO_MODEL, IngestSettings, resolve_auto_model
from tasks.text.split import SplitSettings


def _built(uri: str, model_id: str) -> None:
    Dataset(uri).prepare(Fingerprint.of(ModelInfo(model_id, 384, 256), SplitSettings()))


def test_a_new_dataset_gets_the_default_backend(tmp_path):
    settings = IngestSettings(source_dir=str(tmp_path), index_uri=str(tmp_path / "new"))
    assert settings.model == AUTO_MODEL, "validation leaves `auto` as it is"
    settings = resolve_auto_model(settings)
    assert settings.model == DEFAULT_MODEL
    assert DEFAULT_MODEL == "cjk:headings:dual:onnx-int8-token:all-MiniLM-L6-v2,use:multilingual-v3"
    assert not (tmp_path / "new").exists() or not Dataset(str(tmp_path / "new")).exists()


def test_an_existing_dataset_keeps_the_model_it_was_built_with(tmp_path):
    torch_uri, onnx_uri = str(tmp_path / "torch"), str(tmp_path / "onnx")
    _built(torch_uri, BUNDLED_MODEL_ID)  # the old default
    _built(onnx_uri, BUNDLED_MODEL_ID + "+onnx-int8")
    token_uri = str(tmp_path / "token")  # the default before the multilingual one
    _built(token_uri, BUNDLED_MODEL_ID + "+onnx-int8-token")
    for uri, spec in (
        (torch_uri, "all-MiniLM-L6-v2"),
        (onnx_uri, "onnx-int8:all-MiniLM-L6-v2"),
        (token_uri, "onnx-int8-token:all-MiniLM-L6-v2"),
    ):
        default = IngestSettings(source_dir=str(tmp_path), index_uri=uri)
        assert resolve_auto_model(default).model == spec
        auto = IngestSettings(source_dir=str(tmp_path), index_uri=uri, model=AUTO_MODEL)
        assert resolve_auto_model(auto).model == spec
        rebuilt = IngestSettings(source_dir=str(tmp_path), index_uri=uri, rebuild=True)
        assert resolve_auto_model(rebuilt).model == spec, (
            "--rebuild alone keeps the model; --model changes it"
        )


def test_an_explicit_model_is_taken_as_given(tmp_path):
    uri = str(tmp_path / "torch")
    _built(uri, BUNDLED_MODEL_ID)
    settings = resolve_auto_model(
        IngestSettings(source_dir=str(tmp_path), index_uri=uri, model="hash")
    )
    assert settings.model == "hash"
    assert settings.narrow(IngestSettings) == settings, "resolved once, then plain data"


@pytest.mark.integration
def test_through_the_flow_auto_keeps_the_model_and_another_asks_for_rebuild(
    prefect_backend, tmp_path
):
    from flows.ingest import ingest

    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nLighthouse keepers trim wicks.\n", "utf-8")
    uri = str(tmp_path / "index")
    assert ingest(source_dir=str(corpus), index_uri=uri, model="hash:64").indexed == 1
    (corpus / "b.md").write_text("# B\n\nSourdough needs a starter.\n", "utf-8")
    again = ingest(source_dir=str(corpus), index_uri=uri)  # --model auto
    assert (again.indexed, again.unchanged) == (1, 1)
    assert Dataset(uri).built_with() == "hash:64"
    with pytest.raises(DatasetError, match="--rebuild"):
        ingest(source_dir=str(corpus), index_uri=uri, model="hash:32")
