"""Evaluation flow: how well the pipeline retrieves the documents a benchmark calls relevant.

    python -m flows.evaluate --corpus DIR --queries Q.jsonl --qrels R.tsv
                             [--mode vector fts hybrid] [--index URI] [-k 10]

Ingests the corpus into a temporary dataset (or, with --index, into that dataset once and
reuses it on later runs), runs every query in batch in each mode, ranks documents by their
best chunk and prints JSON with nDCG@k, recall@k and MRR@k per mode. Qrels name documents by
their path relative to the corpus folder, which is the index's doc_id.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from prefect import flow, get_run_logger

from flows.ingest import ingest
from tasks.evaluate import read_qrels, score_run
from tasks.search import MODES, SearchParams, read_queries, search_task
from tasks.store import DatasetError, dataset_exists, read_fingerprint


@flow(name="evaluate")
def evaluate(
    corpus: str,
    queries: str,
    qrels: str,
    modes: Sequence[str] = MODES,
    index_uri: str | None = None,
    k: int = 10,
) -> dict:
    """Metrics per mode for the queries and judgements against the corpus."""
    logger = get_run_logger()
    batch, judgements = read_queries(queries), read_qrels(qrels)
    with _dataset(corpus, index_uri) as uri:
        texts = [q.query for q in batch]
        results = {}
        for mode in modes:
            hits = search_task(uri, texts, SearchParams(k=k, mode=mode, per_doc=True))
            ranked = zip(batch, hits, strict=True)
            run = {q.qid: [hit.doc_id for hit in found] for q, found in ranked}
            results[mode] = score_run(run, judgements, k)
            logger.info("%s: %s", mode, results[mode])
        model = read_fingerprint(uri)["model"]
    return {
        "corpus": corpus,
        "index": index_uri,
        "model": model,
        "queries": len(batch),
        "judged_queries": len(judgements),
        "k": k,
        "modes": results,
    }


@contextmanager
def _dataset(corpus: str, index_uri: str | None) -> Iterator[str]:
    """The dataset to search: `index_uri` if it already exists, else the corpus ingested
    into it (or into a temporary dataset, removed afterwards, when there is no URI). A store
    that cannot be reached fails at once, before any ingest."""
    if index_uri is not None:
        if not dataset_exists(index_uri):
            ingest(source_dir=corpus, index_uri=index_uri)
        yield index_uri
        return
    with tempfile.TemporaryDirectory(prefix="doc-indexer-eval-") as folder:
        uri = str(Path(folder) / "index")
        ingest(source_dir=corpus, index_uri=uri)
        yield uri


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m flows.evaluate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--corpus", required=True, help="folder of documents the qrels name")
    parser.add_argument("--queries", required=True, help='JSON Lines of {"qid", "query"}')
    parser.add_argument("--qrels", required=True, help="TSV: qid, file, relevance")
    parser.add_argument("--mode", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--index", help="dataset to reuse (built from the corpus if missing)")
    parser.add_argument("-k", type=int, default=10, help="cut-off (default: %(default)s)")
    args = parser.parse_args(argv)
    if not Path(args.corpus).is_dir():
        parser.error(f"corpus folder not found: {args.corpus}")
    try:
        read_queries(args.queries), read_qrels(args.qrels)  # clear errors before the flow
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    if args.k < 1:
        parser.error("-k must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        report = evaluate(
            corpus=str(Path(args.corpus).resolve()),
            queries=args.queries,
            qrels=args.qrels,
            modes=args.mode,
            index_uri=args.index,
            k=args.k,
        )
    except DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
