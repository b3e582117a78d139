"""Kill -9 anywhere: an ingest killed at points spread over a whole run, then resumed, ends
with the table and ledger of a clean run, and the audit finds nothing.

    python -m benchmarks.kills [--smoke] [--files N] [--model SPEC]

The run under test updates a dataset: it indexes new and edited files and deletes vanished
ones, in small batches, then finalizes. Each kill point (tasks/core/faults.py: load = while
parsing, embed, write = between a batch's chunks and ledger commits, delete, index, compact)
is hit on a fresh copy of the dataset by `python -m flows.ingest` with DOC_INDEXER_CRASH set
(the process SIGKILLs itself there, its parser process with it); then the same command
runs again to the end. The table
printed says, per point, whether the process died there, the resumed run's exit status, the
audit's problems after the resume, and whether the chunks (ids, texts, vectors within 1e-5)
and the ledger equal those of the same run done without a kill. Exit status 1 if any differ.

`--model` defaults to the hash embedder (the kills test the pipeline's commits, not the
model); --smoke hits two points of a small folder (SMOKE_KILLS), for `make test`: every step
of the script once, in seconds. The commands share one
temporary Prefect server in a fresh PREFECT_HOME (or the server in PREFECT_API_URL).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.support.prefect_api import prefect_api_in
from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import VECTOR_COLUMN
from tasks.ingest.audit import audit

ROOT = Path(__file__).resolve().parents[1]
BATCH_SIZE = 4  # files per batch: many batches, so kills land between them too
# Each batch its own commit, so the write points below fall where they are meant to (a kill
# inside a commit of several batches: tests/test_faults.py).
COMMIT_CHUNKS = 1
# (point, occurrence): spread over a run that indexes 28 files (8 edited, 20 new: 7 batches),
# deletes 8 and finalizes (two tables compacted).
KILLS = [
    ("load", 1), ("load", 5), ("load", 10), ("load", 15), ("load", 20), ("load", 28),
    ("embed", 1), ("embed", 3), ("embed", 5), ("embed", 6), ("embed", 7),
    ("write", 1), ("write", 2), ("write", 4), ("write", 6), ("write", 7),
    ("delete", 1), ("index", 1), ("compact", 1), ("compact", 2),
]  # fmt: skip
# The delete's and the finalize's points: write, load and embed kills are tests/test_faults.py's.
SMOKE_KILLS = [("delete", 1), ("compact", 1)]
WORDS = (
    "borrow checker lifetime trait closure iterator module crate package macro vector string "
    "slice pattern match enum struct method generic thread channel mutex future async error"
).split()


def write_folder(folder: Path, files: int, edited: bool) -> None:
    """`files` Markdown notes; `edited` changes every fifth one and adds `files // 2` new ones
    (the run under test), while `old/` notes exist only before (the run deletes them)."""
    for n in range(files):
        words = [WORDS[(n * 7 + i * 3) % len(WORDS)] for i in range(160)]
        extra = " Edited after the first run." if edited and n % 5 == 0 else ""
        body = "\n\n".join(" ".join(words[i : i + 40]) + "." for i in range(0, 160, 40))
        (folder / f"note-{n:03d}.md").write_text(f"# Note {n}\n\n{body}{extra}\n", "utf-8")
    old, new = folder / "old", folder / "new"
    if edited:
        shutil.rmtree(old, ignore_errors=True)
        new.mkdir(exist_ok=True)
        for n in range(files // 2):
            (new / f"added-{n:03d}.md").write_text(f"# Added {n}\n\n{WORDS[n]} added.\n", "utf-8")
    else:
        old.mkdir(exist_ok=True)
        for n in range(8):
            (old / f"gone-{n}.md").write_text(f"# Gone {n}\n\nThis note goes away.\n", "utf-8")


def ingest(folder: Path, uri: Path, model: str, env: dict[str, str], crash: str = "") -> int:
    """`python -m flows.ingest` in a session of its own; whatever it leaves running after a
    kill (its parser process) is killed with it. Output goes to a log beside the dataset.

    Each dataset has its own Prefect result storage, shared by a killed run and its resume (a
    resume reuses what the killed run finished, as a user's would) but not with the clean
    run, whose cached loads and embeds would otherwise let a kill run skip the kill point."""
    command = [sys.executable, "-m", "flows.ingest", str(folder), "--index", str(uri)]
    command += ["--model", model, "--batch-size", str(BATCH_SIZE)]
    command += ["--commit-chunks", str(COMMIT_CHUNKS)]
    run_env = {**env, "PREFECT_LOCAL_STORAGE_PATH": str(uri.parent / f"{uri.name}.results")}
    if crash:
        run_env["DOC_INDEXER_CRASH"] = crash
    log = uri.parent / f"{uri.name}.log"
    with open(log, "ab") as output:
        process = subprocess.Popen(
            command, cwd=ROOT, env=run_env, stdout=output, stderr=output, start_new_session=True
        )
        returncode = process.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    if returncode not in (0, -signal.SIGKILL):
        print(log.read_text("utf-8", "replace")[-3000:], file=sys.stderr)
    return returncode


def snapshot(uri: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The chunks (without times) and the ledger (what a run decides), sorted."""
    dataset = Dataset(str(uri))
    columns = ["chunk_id", "doc_id", "chunk_index", "chunk_count", "text_hash", VECTOR_COLUMN]
    chunks = dataset.chunks.search().select(columns).limit(None).to_list()
    ledger = dataset.documents.to_arrow().select(
        ["doc_id", "content_hash", "status", "n_chunks", "pipeline_fingerprint"]
    )
    return (
        sorted(chunks, key=lambda row: row["chunk_id"]),
        sorted(ledger.to_pylist(), key=lambda row: row["doc_id"]),
    )


def same(a: tuple[list, list], b: tuple[list, list]) -> bool:
    (chunks_a, ledger_a), (chunks_b, ledger_b) = a, b
    if ledger_a != ledger_b or len(chunks_a) != len(chunks_b):
        return False
    for x, y in zip(chunks_a, chunks_b, strict=True):
        if {k: v for k, v in x.items() if k != VECTOR_COLUMN} != {
            k: v for k, v in y.items() if k != VECTOR_COLUMN
        }:
            return False
        if np.abs(np.asarray(x[VECTOR_COLUMN]) - np.asarray(y[VECTOR_COLUMN])).max() > 1e-5:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kills", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="2 kill points, 12 files")
    parser.add_argument("--files", type=int, default=None, help="notes before the run (40)")
    parser.add_argument("--model", default="hash", help="embedding model (default: hash)")
    args = parser.parse_args(argv)
    files = args.files or (12 if args.smoke else 40)
    kills = SMOKE_KILLS if args.smoke else KILLS
    with tempfile.TemporaryDirectory(prefix="doc-indexer-kills-") as scratch:
        work = Path(scratch)
        prefect_api_in(work)  # every run's, or a new home's temporary server
        env = {key: value for key, value in os.environ.items() if key != "DOC_INDEXER_CRASH"}
        folder, base = work / "docs", work / "base"
        folder.mkdir()
        write_folder(folder, files, edited=False)
        if ingest(folder, base, args.model, env) != 0:
            print("the first ingest failed", file=sys.stderr)
            return 1
        write_folder(folder, files, edited=True)
        clean = work / "clean"
        shutil.copytree(base, clean)
        started = time.perf_counter()
        if ingest(folder, clean, args.model, env) != 0:
            print("the clean run failed", file=sys.stderr)
            return 1
        print(f"clean run: {time.perf_counter() - started:.1f} s, {files} notes edited/added/")
        expected = snapshot(clean)
        clean_audit = audit(Dataset(str(clean)), str(folder))
        if not clean_audit.clean:  # then a kill is not to blame for what the audit finds
            print(clean_audit.render())
        print(f"{'kill point':<14}{'died':>6}{'resume rc':>11}{'audit':>8}{'equal':>8}")
        failures = 0
        for point, nth in kills:
            uri = work / f"kill-{point}-{nth}"
            shutil.copytree(base, uri)
            died = ingest(folder, uri, args.model, env, crash=f"{point}:{nth}") == -signal.SIGKILL
            resumed = ingest(folder, uri, args.model, env)
            problems = len(audit(Dataset(str(uri)), str(folder)).problems)
            equal = resumed == 0 and same(snapshot(uri), expected)
            failures += not (died and equal and problems == 0)
            print(f"{point + ':' + str(nth):<14}{died!s:>6}{resumed:>11}{problems:>8}{equal!s:>8}")
            shutil.rmtree(uri)
        print(f"{len(kills) - failures} of {len(kills)} kill points ended as the clean run")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
