"""Scale: thousands of small notes through the whole `flows.ingest` command.

    .venv/bin/python -m benchmarks.scale [--files N | --100k] [--model SPEC ...]
        [--task-runner dask] [--smoke]

Generates N Markdown notes (default 10,000; --100k: 100,000) of about 1.5 KB each (two chunks),
made of paragraphs of ../shared/corpus/md, every note unique. For each model (default: the
hash embedder, which measures the pipeline without a model, and the default model; --model
picks), in a fresh Prefect home and with no API server (the command starts its temporary
one, as a user's first run does):

- the whole `python -m flows.ingest NOTES --index I --model M` command, process start to exit:
  wall, files/s, chunks/s, seconds per stage and commits (from its summary), time from start
  to the first embedding, and peak RSS of the ingest process and of its whole process tree
  (parser processes and the temporary server included), sampled every 0.2 s; the ingest
  process's RSS after the first tenth of the run is printed beside its peak (growth);
- a no-change re-run of the same command;
- a cold `python -m flows.query` on the result.

--task-runner dask runs the ingest on a local Dask cluster; the summary then also prints the
single writer's ceiling (chunks per commit × commits per second of write time) beside the rate
the embedding ran at. --smoke: 40 notes from data/sample/rust-book, the hash embedder only,
against $PREFECT_API_URL when set (a test's server): the same steps in seconds.
Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.support.processes import PeakTreeRss, mib
from tasks.embed.models import DEFAULT_MODEL

ROOT = Path(__file__).resolve().parents[1]
SHARED_MD = ROOT.parent / "shared" / "corpus" / "md"
SAMPLE_MD = ROOT / "data" / "sample" / "rust-book"
HASH_MODEL = "hash:384"
NOTE_CHARS = 1_500
QUESTION = "How do references borrow a value without taking ownership?"

TIME_LINE = re.compile(r"time: ([\d.]+) s \((.*)\); (\d+) commits; embed")
STAGE = re.compile(r"([a-z ()]+) ([\d.]+)")
FIRST_PASS = re.compile(r"first forward pass ([\d.]+) s")
COUNTS = re.compile(r"files: (\d+) seen, (\d+) indexed.*chunks: (\d+) written \((\d+) embedded")


def paragraphs(source: Path) -> list[str]:
    """The prose paragraphs of the Markdown files under `source` (no code, no headings)."""
    found = []
    for path in sorted(source.rglob("*.md")):
        for block in path.read_text("utf-8").split("\n\n"):
            text = " ".join(block.split())
            if len(text) > 120 and not text.startswith(("#", "```", "<", "|", "-", "*")):
                found.append(text)
    if not found:
        raise SystemExit(f"no Markdown paragraphs under {source}")
    return found


def generate_notes(count: int, target: Path, source: Path) -> Path:
    """`count` notes of about NOTE_CHARS characters: a heading, then paragraphs taken in turn
    from `source`, each marked with the note's number (so no chunk text repeats)."""
    texts = paragraphs(source)
    target.mkdir(parents=True)
    cursor = 0
    for k in range(count):
        parts = [f"# Note {k}"]
        while sum(map(len, parts)) < NOTE_CHARS:
            parts.append(f"{texts[cursor % len(texts)]} (note {k})")
            cursor += 1
        folder = target / f"{k // 1000:03d}"  # a thousand notes per folder
        folder.mkdir(exist_ok=True)
        (folder / f"note-{k:06d}.md").write_text("\n\n".join(parts) + "\n", "utf-8")
    return target


@dataclass
class Run:
    """One whole command: its wall time, output and memory."""

    wall: float
    stdout: str
    own_peak_mib: float = 0.0
    own_after_first_tenth_mib: float = 0.0
    tree_peak_mib: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)


def run_command(module: str, args: list[str], env: dict[str, str]) -> Run:
    """`python -m MODULE ARGS` as a user runs it, with its RSS sampled."""
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    with PeakTreeRss(pid=process.pid) as peaks:
        stdout, _ = process.communicate()
    wall = time.perf_counter() - start
    if process.returncode not in (0, 2):  # 2: some files failed, the run completed
        raise SystemExit(f"{module} {' '.join(args)} exited {process.returncode}")
    own = peaks.own or [0]
    tenth = own[: max(1, len(own) // 10)]
    return Run(wall, stdout, mib(max(own)), mib(max(tenth)), mib(peaks.peak))


def ingest_report(notes: Path, model: str, work: Path, args: argparse.Namespace) -> dict:
    """The first run, the no-change re-run and a cold query, for one model."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL" or args.smoke}
    env["PREFECT_HOME"] = str(work / f"prefect-{model.replace(':', '-')}")
    index = str(work / f"index-{model.replace(':', '-')}")
    command = [str(notes), "--index", index, "--model", model]
    if args.task_runner != "threads":
        command += ["--task-runner", args.task_runner]
    first = run_command("flows.ingest", command, env)
    again = run_command("flows.ingest", command, env)
    query = run_command("flows.query", [QUESTION, "--index", index, "-k", "3"], env)
    timing, counts = TIME_LINE.search(first.stdout), COUNTS.search(first.stdout)
    if timing is None or counts is None:
        raise SystemExit(f"no summary in the ingest output:\n{first.stdout}")
    stages = {name.strip(): float(s) for name, s in STAGE.findall(timing[2])}
    chunks, commits = int(counts[3]), int(timing[3])
    first_pass = FIRST_PASS.search(first.stdout)
    report = {
        "model": model,
        "files": int(counts[1]),
        "indexed": int(counts[2]),
        "chunks": chunks,
        "wall_s": round(first.wall, 1),
        "files_per_s": round(int(counts[1]) / first.wall, 1),
        "chunks_per_s": round(chunks / first.wall, 1),
        "flow_s": float(timing[1]),
        "stage_s": stages,
        "commits": commits,
        "first_embedding_s": float(first_pass[1]) if first_pass else None,
        "peak_rss_ingest_mib": first.own_peak_mib,
        "rss_ingest_first_tenth_mib": first.own_after_first_tenth_mib,
        "peak_rss_tree_mib": first.tree_peak_mib,
        "no_change_rerun_s": round(again.wall, 1),
        "no_change_rerun_peak_rss_mib": again.own_peak_mib,
        "cold_query_s": round(query.wall, 2),
    }
    write_s, embed_s = stages.get("write", 0.0), stages.get("embed", 0.0)
    if commits and write_s:  # one writer: how many chunks a second it can commit
        report["writer_ceiling_chunks_per_s"] = round(chunks / write_s, 1)
    if embed_s:
        report["embedding_chunks_per_s"] = round(chunks / embed_s, 1)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--files", type=int, default=10_000, help="notes to generate")
    size.add_argument("--100k", dest="hundred_k", action="store_true", help="100,000 notes")
    parser.add_argument(
        "--model",
        action="append",
        help=f"model spec, repeatable (default: {HASH_MODEL} and {DEFAULT_MODEL})",
    )
    parser.add_argument("--task-runner", choices=["threads", "dask"], default="threads")
    parser.add_argument("--keep", action="store_true", help="keep the notes and indexes")
    parser.add_argument(
        "--smoke", action="store_true", help="40 notes of data/sample, hash embedder, seconds"
    )
    args = parser.parse_args()
    count = 100_000 if args.hundred_k else 40 if args.smoke else args.files
    models = args.model or ([HASH_MODEL] if args.smoke else [HASH_MODEL, DEFAULT_MODEL])
    work = Path(tempfile.mkdtemp(prefix="doc-indexer-scale-"))
    started = time.perf_counter()
    notes = generate_notes(count, work / "notes", SAMPLE_MD if args.smoke else SHARED_MD)
    size_mib = sum(p.stat().st_size for p in notes.rglob("*.md")) / 2**20
    print(
        f"{count} notes, {size_mib:.1f} MiB, generated in {time.perf_counter() - started:.1f} s;"
        f" task runner {args.task_runner}; {work}"
    )
    reports = [ingest_report(notes, model, work, args) for model in models]
    rows = [key for key in reports[0] if key != "model"]
    width = max(map(len, rows))
    print(f"{'':<{width}}  " + "  ".join(f"{r['model']:>24}" for r in reports))
    for key in rows:
        cells = [r.get(key) for r in reports]
        text = [
            ", ".join(f"{k} {v:g}" for k, v in c.items()) if isinstance(c, dict) else str(c)
            for c in cells
        ]
        print(f"{key:<{width}}  " + "  ".join(f"{t:>24}" for t in text))
    print(json.dumps({"notes": count, "task_runner": args.task_runner, "runs": reports}))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
