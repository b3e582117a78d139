"""Ingest speed and memory: the whole command next to the model's own encode of the same texts.

    .venv/bin/python -m benchmarks.ingest [DIR] [--model SPEC] [--batch-size N]
        [--generate-md N [--sections]] [--in-process [--first-run-only]] [--smoke]

Default (whole process): `python -m flows.ingest DIR` runs as a fresh process with a fresh
Prefect home and no API server (so it starts a temporary one, as a user's first run does); its
wall time from process start to exit is measured, with the peak RSS of the ingest process and
of its whole process tree (parser process and temporary Prefect server included), sampled
every 0.2 s, and the time to its first forward pass (from its summary). Then the yardstick:
torch `SentenceTransformer.encode` of exactly the chunk texts that run wrote, bundled
all-MiniLM-L6-v2, batch size 64, in this process. `ratio` = whole-process wall / that encode
time. Then a no-change re-run, whole process again.

With --generate-md N, DIR is instead a generated set of N Markdown files made from
../shared/corpus/md (every line of copy k ends with "(copy k)", so no chunk text repeats and
nothing is reused); with --sections each generated file is one section of a corpus file.

--in-process: the older detail view, run through the flow function in this process: seconds
per stage, peak RSS by quarter, OCR pages/s (e.g. on
../shared/corpus/nasty/pdf/scanned_no_text_layer), then raw encodes of the written texts (the
library's `model.encode` and the pipeline's grouped encoder) and an unchanged second run;
--first-run-only stops after the first run.
Prints a table and one JSON line.

`--smoke`: DIR is SMOKE_FILES of data/sample (English and Chinese, Markdown and HTML) copied
to a temporary folder, --generate-md cycles data/sample/rust-book instead of
../shared/corpus/md, and the whole-process runs keep PREFECT_API_URL when it is set (a test's
server) instead of starting a temporary server: the same runs in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORK = Path(tempfile.mkdtemp(prefix="doc-indexer-bench-"))
os.environ["PREFECT_HOME"] = str(WORK / "prefect")  # before Prefect is imported: no old caches

import lancedb  # noqa: E402

from flows.ingest import ingest  # noqa: E402
from tasks.dataset.schema import CHUNKS_TABLE  # noqa: E402
from tasks.embed.base import ENCODE_BATCH_SIZE  # noqa: E402
from tasks.embed.models import DEFAULT_MODEL, get_embedder  # noqa: E402

DEFAULT_TORCH_MODEL = "all-MiniLM-L6-v2"  # the yardstick: bundled model on torch
from benchmarks.support.processes import PeakTreeRss, mib  # noqa: E402
from tasks.embed.torch_backend import SentenceTransformerEmbedder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample"
SHARED_MD = ROOT.parent / "shared" / "corpus" / "md"
SMOKE_FILES = (  # under data/sample
    "rust-book/ch04-01-what-is-ownership.md",
    "python-docs/venv.html",
    "debian-handbook-zh-cn/sect.apt-file.html",
)


def smoke_folder(target: Path) -> Path:
    """SMOKE_FILES copied under `target`, in their data/sample folders."""
    for relative in SMOKE_FILES:
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SAMPLE / relative, target / relative)
    return target


def generate_markdown(
    count: int, target: Path, sections: bool = False, source: Path = SHARED_MD
) -> Path:
    """`count` Markdown files cycled from `source` (the shared corpus), each line made unique
    per copy.

    Whole chapters by default; with `sections`, one section (heading to next heading) each.
    """
    sources = sorted(source.rglob("*.md"))
    sources = [p for p in sources if p.stat().st_size > 2000]
    if not sources:
        raise SystemExit(f"{source} not found: cannot generate the Markdown set")
    texts = [p.read_text("utf-8") for p in sources]
    if sections:
        texts = [part for text in texts for part in re.split(r"\n(?=#+ )", text) if part.strip()]
    target.mkdir(parents=True)
    for k in range(count):
        lines = texts[k % len(texts)].splitlines()
        text = "\n".join(f"{line} (copy {k})" if line.strip() else line for line in lines)
        (target / f"{k:05d}.md").write_text(text, "utf-8")
    return target


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ingest")
    parser.add_argument("source_dir", nargs="?", default=str(ROOT / "data" / "sample"))
    parser.add_argument("--batch-size", type=int, help="as for flows.ingest (default: its own)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model spec, as for flows.ingest")
    parser.add_argument("--generate-md", type=int, metavar="N", help="ingest N generated .md files")
    parser.add_argument(
        "--sections", action="store_true", help="generated files hold one section each"
    )
    parser.add_argument(
        "--first-run-only",
        action="store_true",
        help="stop after the first run: time, stages and peak RSS, no raw encode (memory runs)",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the flow function in this process: stage seconds, OCR pages/s, raw encodes",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="3 files of data/sample (no ../shared), in seconds"
    )
    args = parser.parse_args()
    uri = str(WORK / "index")
    if args.smoke:
        args.source_dir = str(smoke_folder(WORK / "smoke"))
    if args.generate_md:
        source = SAMPLE / "rust-book" if args.smoke else SHARED_MD
        args.source_dir = str(
            generate_markdown(args.generate_md, WORK / "md-set", args.sections, source)
        )
    if not args.in_process:
        return _whole_process(args, uri)
    run = {
        "source_dir": str(Path(args.source_dir).resolve()),
        "index_uri": uri,
        "model": args.model,
        **({"batch_size": args.batch_size} if args.batch_size else {}),
    }

    start = time.perf_counter()
    with PeakTreeRss() as tree:
        first = ingest(**run)
    first_wall = time.perf_counter() - start
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result = {
        "source_dir": args.source_dir,
        "model": args.model,
        "files": first.files_seen,
        "chunks": first.chunks_written,
        "first_run_flow_s": round(first.seconds, 2),
        "first_run_wall_s": round(first_wall, 2),
        "stage_seconds": {
            **{k: round(v, 2) for k, v in first.stage_seconds.items()},
            # in the flow but in no stage: planning batches, task-run bookkeeping, logging
            "other in flow": round(first.seconds - sum(first.stage_seconds.values()), 2),
            # outside the flow function: engine start, flow-run creation and final state
            "prefect outside flow": round(first_wall - first.seconds, 2),
        },
        "peak_rss_ingest_process_mib": mib(peak_rss),
        "peak_rss_process_tree_mib": mib(tree.peak),
        "peak_rss_ingest_process_by_quarter_mib": tree.own_peak_by_quarter(),
        # OCR of pages without a text layer, from the first run's summary: seconds of OCR
        # work (rendering and recognition) in the parser process, not wall time of the run
        "ocr_pages": first.ocr_pages,
        "ocr_pages_per_s": round(first.ocr_pages / first.ocr_seconds, 3)
        if first.ocr_seconds
        else 0,
    }
    if not args.first_run_only:
        result.update(_raw_and_second_run(run, first.chunks_written, first.seconds))
    width = max(map(len, result))
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    print(json.dumps(result))
    return 0


FIRST_PASS = re.compile(r"first forward pass ([\d.]+) s")
WRITTEN = re.compile(r"chunks: (\d+) written")


def _command(args: argparse.Namespace, uri: str) -> tuple[float, str, PeakTreeRss]:
    """Run `python -m flows.ingest` as a user would: (wall seconds, stdout, its RSS peaks)."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # a temporary server
    if args.smoke:  # a test's server, when PREFECT_API_URL names one: no temporary server
        env = dict(os.environ)
    command = [sys.executable, "-m", "flows.ingest", args.source_dir, "--index", uri]
    command += ["--model", args.model]
    command += ["--batch-size", str(args.batch_size)] if args.batch_size else []
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    with PeakTreeRss(pid=process.pid) as peaks:
        stdout, _ = process.communicate()
    wall = time.perf_counter() - start
    if process.returncode not in (0, 2):  # 2: some files failed, the run completed
        raise SystemExit(f"{command} exited {process.returncode}")
    return wall, stdout, peaks


def _whole_process(args: argparse.Namespace, uri: str) -> int:
    wall, stdout, peaks = _command(args, uri)
    print(stdout, file=sys.stderr)
    first_pass = FIRST_PASS.search(stdout)
    texts = lancedb.connect(uri).open_table(CHUNKS_TABLE).to_arrow().column("text").to_pylist()
    yardstick = get_embedder(DEFAULT_TORCH_MODEL)
    assert isinstance(yardstick, SentenceTransformerEmbedder)
    start = time.perf_counter()
    yardstick.model.encode(texts, batch_size=ENCODE_BATCH_SIZE, normalize_embeddings=True)
    encode = time.perf_counter() - start
    second_wall, second_stdout, _ = _command(args, uri)
    result = {
        "source_dir": args.source_dir,
        "model": args.model,
        "chunks": len(texts),
        "whole_process_wall_s": round(wall, 2),
        "torch_encode_s": round(encode, 2),
        "ratio": round(wall / encode, 3),
        "first_forward_pass_s": float(first_pass[1]) if first_pass else None,
        "peak_rss_ingest_process_mib": mib(max(peaks.own, default=0)),
        "peak_rss_process_tree_mib": mib(peaks.peak),
        "no_change_rerun_wall_s": round(second_wall, 2),
        "no_change_rerun_written": int(m[1]) if (m := WRITTEN.search(second_stdout)) else None,
    }
    width = max(map(len, result))
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    print(json.dumps(result))
    return 0


def _raw_and_second_run(run: dict, chunks: int, first_seconds: float) -> dict:
    """Raw encodes of the chunk texts the first run wrote, then an unchanged second run.

    Two raw figures: sentence-transformers' own `model.encode` (all texts in one call, batch
    size ENCODE_BATCH_SIZE; the issue's baseline; not for ONNX specs, which have no such
    call), and the pipeline's encoder on all texts in one call (token-length groups over the
    whole set), which isolates what the pipeline itself costs.
    """
    uri = run["index_uri"]
    texts = lancedb.connect(uri).open_table(CHUNKS_TABLE).to_arrow().column("text").to_pylist()
    embedder = get_embedder(run["model"])
    result = {"ingest_chunks_per_s": round(chunks / first_seconds, 2)}
    if isinstance(embedder, SentenceTransformerEmbedder):
        start = time.perf_counter()
        embedder.model.encode(texts, batch_size=ENCODE_BATCH_SIZE, normalize_embeddings=True)
        raw_seconds = time.perf_counter() - start
        result["raw_model_encode_chunks_per_s"] = round(chunks / raw_seconds, 2)
        result["ratio"] = round(raw_seconds / first_seconds, 3)
    start = time.perf_counter()
    embedder.encode(texts)
    grouped_seconds = time.perf_counter() - start
    result["raw_grouped_encode_chunks_per_s"] = round(chunks / grouped_seconds, 2)
    result["ratio_to_grouped_encode"] = round(grouped_seconds / first_seconds, 3)

    start = time.perf_counter()
    second = ingest(**run)
    second_wall = time.perf_counter() - start
    return {
        **result,
        "second_run_flow_s": round(second.seconds, 2),
        "second_run_wall_s": round(second_wall, 2),
        "second_run_unchanged": second.unchanged,
    }


if __name__ == "__main__":
    sys.exit(main())
