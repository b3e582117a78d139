"""Evaluation flow: how well the pipeline retrieves the documents a benchmark calls relevant.

    python -m flows.evaluate --corpus DIR --queries Q.jsonl --qrels R.tsv
                             [--mode vector fts hybrid] [--index URI] [-k 10]

Ingests the corpus into a temporary dataset (or, with --index, into that dataset once and
reuses it on later runs), runs every query in batch in each mode, ranks documents by their
best chunk and prints JSON with nDCG@k, recall@k and MRR@k per mode, and the settings that
produced them (the dataset's fingerprint: model, splitter, analyser; hybrid mode's fusion).
Qrels name documents by their path relative to the corpus folder, which is the index's
doc_id. `python -m benchmarks.quality` runs every dev set and prints one table.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from pydantic import field_validator

from flows.cli import exit_process, exit_status
from flows.ingest import ingest
from flows.query_flow import search_task
from tasks.core.options import Settings, add_options, flow_parameters, option, parse_options
from tasks.core.prefect_compat import prompt_heartbeats
from tasks.dataset.dataset import Dataset
from tasks.eval.metrics import read_qrels, score_run
from tasks.search.params import MODES, Mode, SearchParams
from tasks.search.queries import read_queries
from tasks.search.searcher import Searcher

prompt_heartbeats()  # a flow run returns when its work is done, not up to 1 s later


class EvaluateRequest(Settings):
    """A benchmark: its corpus, queries and judgements, and how to run it."""

    corpus: str = option(..., "folder of documents the qrels name")
    queries: str = option(..., 'JSON Lines of {"qid", "query"}')
    qrels: str = option(..., "TSV: qid, file, relevance")
    modes: list[Mode] = option(list(MODES), "the modes to score", flag="--mode", several=True)
    index_uri: str | None = option(
        None, "dataset to reuse (built from the corpus if missing)", flag="--index"
    )
    k: int = option(10, "cut-off", flag="-k", ge=1)

    @field_validator("corpus")
    @classmethod
    def _is_a_folder(cls, value: str) -> str:
        if not Path(value).is_dir():
            raise ValueError(f"corpus folder not found: {value}")
        return value


@flow(name="evaluate")
@flow_parameters(EvaluateRequest)
def evaluate(request: EvaluateRequest) -> dict[str, Any]:
    """Metrics per mode for the queries and judgements against the corpus."""
    logger = get_run_logger()
    batch, judgements = read_queries(request.queries), read_qrels(request.qrels)
    with _dataset(request.corpus, request.index_uri) as uri:
        texts = [q.query for q in batch]
        results = {}
        for mode in request.modes:
            params = SearchParams(k=request.k, mode=mode, per_doc=True)
            hits = search_task(uri, texts, params)
            run = {
                q.qid: [hit.doc_id for hit in found] for q, found in zip(batch, hits, strict=True)
            }
            results[mode] = score_run(run, judgements, request.k)
            logger.info("%s: %s", mode, results[mode])
        fingerprint, fusion = Dataset(uri).fingerprint, Searcher(Dataset(uri)).fusion()
    return {
        "corpus": request.corpus,
        "index": request.index_uri,
        "model": fingerprint.model,
        "settings": {"dataset": asdict(fingerprint), "hybrid": asdict(fusion)},
        "queries": len(batch),
        "judged_queries": len(judgements),
        "k": request.k,
        "modes": results,
    }


@contextmanager
def _dataset(corpus: str, index_uri: str | None) -> Iterator[str]:
    """The dataset to search: `index_uri` if it already exists, else the corpus ingested
    into it (or into a temporary dataset, removed afterwards, when there is no URI). A store
    that cannot be reached fails at once, before any ingest."""
    if index_uri is not None:
        if not Dataset(index_uri).exists():
            ingest(source_dir=corpus, index_uri=index_uri)
        yield index_uri
        return
    with tempfile.TemporaryDirectory(prefix="doc-indexer-eval-") as folder:
        uri = str(Path(folder) / "index")
        ingest(source_dir=corpus, index_uri=uri)
        yield uri


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flows.evaluate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(parser, EvaluateRequest)
    args = parser.parse_args(argv)
    request = parse_options(parser, args, EvaluateRequest)
    try:
        read_queries(request.queries), read_qrels(request.qrels)  # clear errors before the flow
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    request = request.model_copy(update={"corpus": str(Path(request.corpus).resolve())})

    def run() -> int:
        print(json.dumps(evaluate(**request.options()), indent=2))
        return 0

    return exit_status(run)


if __name__ == "__main__":
    exit_process(main())
