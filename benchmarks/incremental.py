"""Cost of re-index runs relative to a full ingest, measured in one process.

    .venv/bin/python -m benchmarks.incremental [CORPUS] [--model NAME] [--smoke]

CORPUS defaults to ../shared/corpus, of which the md/, html/ and pdf/ folders are copied to a
temporary folder. Runs, in order, with a fresh Prefect home and dataset: a full ingest; a
re-run with nothing changed; a run after 1% of the Markdown/HTML files got a new paragraph; a
run after another 1% of the files were deleted. Prints seconds, ratios to the full run, and
what each run did, then one JSON line.

`--smoke` does the same on SMOKE_FILES of data/sample (English and Chinese Markdown and HTML,
no ../shared), editing and deleting every other file instead of one in a hundred.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

WORK = Path(tempfile.mkdtemp(prefix="doc-indexer-incremental-"))
os.environ["PREFECT_HOME"] = str(WORK / "prefect")  # before Prefect is imported: no old caches

import lancedb  # noqa: E402

from flows.ingest import ingest  # noqa: E402
from tasks.dataset.schema import CHUNKS_TABLE  # noqa: E402
from tasks.embed.models import DEFAULT_MODEL  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SUBFOLDERS = ("md", "html", "pdf")
STEP = 100  # one file in STEP is edited, another deleted
# data/sample files copied into the smoke corpus's md/ and html/ folders
SMOKE_FILES = (
    "rust-book/ch04-01-what-is-ownership.md",
    "rust-book/ch08-03-hash-maps.md",
    "python-docs/venv.html",
    "debian-handbook-zh-cn/sect.apt-file.html",
)
SMOKE_STEP = 2


def smoke_corpus(target: Path) -> Path:
    """SMOKE_FILES of data/sample in md/ and html/ folders, as ../shared/corpus has them."""
    for relative in SMOKE_FILES:
        path = ROOT / "data" / "sample" / relative
        folder = target / path.suffix.lstrip(".") / path.parent.name
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, folder / path.name)
    return target


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.incremental")
    parser.add_argument("corpus", nargs="?", default=str(ROOT.parent / "shared" / "corpus"))
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument(
        "--smoke", action="store_true", help="4 files of data/sample, every other one changed"
    )
    args = parser.parse_args()
    corpus = smoke_corpus(WORK / "smoke") if args.smoke else Path(args.corpus)
    step = SMOKE_STEP if args.smoke else STEP
    if not corpus.is_dir():
        print(f"corpus not found at {corpus} (../shared is absent); nothing measured")
        return 0
    source = WORK / "corpus"
    for name in SUBFOLDERS:
        if (corpus / name).is_dir():
            shutil.copytree(corpus / name, source / name)
    uri = str(WORK / "index")
    files = sorted(p for p in source.rglob("*") if p.is_file())
    text_files = [p for p in files if p.suffix in (".md", ".html")]
    share = f"{100 / step:g}%"

    def run(label: str) -> dict:
        start = time.perf_counter()
        summary = ingest(source_dir=str(source), index_uri=uri, model=args.model)
        seconds = time.perf_counter() - start
        return {
            "run": label,
            "seconds": round(seconds, 2),
            "indexed": summary.indexed,
            "unchanged": summary.unchanged,
            "removed": summary.removed,
            "failed": len(summary.failed),
            "chunks_written": summary.chunks_written,
            "chunks_embedded": summary.chunks_embedded,
            "chunks_reused": summary.chunks_reused,
            "stage_seconds": {k: round(v, 2) for k, v in summary.stage_seconds.items()},
        }

    results = [run("full")]
    results.append(run("no change"))
    for i, path in enumerate(text_files[::step]):
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"\n\nAn edited paragraph, number {i}, added by the benchmark.\n")
    results.append(run(f"{share} edited ({len(text_files[::step])} files)"))
    deleted = [p for p in files[step // 2 :: step] if p.exists()]
    for path in deleted:
        path.unlink()
    results.append(run(f"{share} deleted ({len(deleted)} files)"))

    full = results[0]["seconds"]
    rows = lancedb.connect(uri).open_table(CHUNKS_TABLE).count_rows()
    print(f"{len(files)} files, {rows} chunks in the final index")
    print(f"{'run':<26} {'seconds':>8} {'ratio':>7}  indexed unchanged removed embedded reused")
    for r in results:
        print(
            f"{r['run']:<26} {r['seconds']:>8.2f} {r['seconds'] / full:>7.3f}  "
            f"{r['indexed']:>7} {r['unchanged']:>9} {r['removed']:>7} "
            f"{r['chunks_embedded']:>8} {r['chunks_reused']:>6}"
        )
    for r in results:
        r["ratio_to_full"] = round(r["seconds"] / full, 4)
    print(json.dumps({"files": len(files), "final_chunks": rows, "runs": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
