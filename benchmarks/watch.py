"""A live folder: how soon a saved edit is searchable, how a burst of changes is absorbed, and
what the idle watcher costs.

    .venv/bin/python -m benchmarks.watch [DIR] [--model SPEC] [--edits 20] [--burst 1000]
                                         [--idle 20] [--smoke]

DIR (default data/sample) is copied to a temporary folder, and `python -m flows.watch` is
started on it in a child process, as a user starts it (its own temporary Prefect server unless
PREFECT_API_URL is set). Once its reconcile run is done:

- edits: --edits times, a sentence holding a fresh made-up word is appended to a Markdown file
  and timed from the moment the file is saved to the moment a full-text query for that word
  (a warm Searcher in this process, asking every POLL_S) finds it; median and p90.
- burst: --burst new Markdown files are written as fast as possible; the watcher's runs are
  counted (its lines "watch: run N ...") until the ledger records every file, with its
  content hash and status indexed, and a query finds each file's own word.
- idle: CPU time of the watcher process, and of its process tree (the parser process and the
  temporary Prefect server), over --idle seconds with nothing changing.

Prints a table, then one JSON line. `--smoke`: 1 edit, a burst of 20, 1 s idle, SMOKE_QUIET_S
of quiet for a burst to be over (a burst there is one debounced run), the rust-book files of
data/sample, the hash embedder: every step once, in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import shutil
import signal
import statistics
import string
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

import psutil

from tasks.core.reasons import Status
from tasks.dataset.dataset import Dataset
from tasks.embed.models import DEFAULT_MODEL
from tasks.ingest.discover import file_sha256
from tasks.search.params import SearchParams
from tasks.search.searcher import Searcher

ROOT = Path(__file__).resolve().parents[1]
EDITED = "rust-book/ch08-01-vectors.md"  # the Markdown file every edit appends to
BURST_FOLDER = "burst"  # made before the watcher starts; the burst's files go in it
POLL_S = 0.02  # how often the edit's query is asked again
START_S = 1800  # the watcher's reconcile run, at most
SETTLE_S = 900  # an edit or the burst applied, at most
QUIET_S = 3.0  # no new run for this long after the burst: it is over
SMOKE_QUIET_S = 1.0  # --smoke: 20 files written at once, debounced 0.2 s into one run


def made_up_word(rng: random.Random) -> str:
    """A word no document holds (letters only, so every analyser keeps it whole)."""
    return "zq" + "".join(rng.choices(string.ascii_lowercase, k=10))


def _default_sigint() -> None:
    """In the watcher's process before it starts: SIGINT (how `stop` ends it, as Ctrl-C does)
    handled, also where this benchmark was started with SIGINT ignored (a background job of
    a shell without job control), which the watcher would otherwise inherit."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Watcher:
    """`python -m flows.watch` in a child process; its printed run lines, as they come."""

    def __init__(self, source: Path, uri: str, model: str, work: Path) -> None:
        command = [sys.executable, "-m", "flows.watch", str(source), "--index", uri]
        self.log = work / "watch.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [*command, "--model", model],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                preexec_fn=_default_sigint,
            )
        self.runs: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("watch: run "):
                self.runs.put(line.strip())

    def next_run(self, timeout: float) -> str:
        if self.process.poll() is not None:
            raise RuntimeError(f"the watcher exited:\n{self.log.read_text()[-3000:]}")
        try:
            return self.runs.get(timeout=timeout)
        except queue.Empty:
            log = self.log.read_text()[-3000:]
            raise RuntimeError(f"no run within {timeout:g} s:\n{log}") from None

    def runs_until_quiet(self, quiet: float) -> list[str]:
        found: list[str] = []
        while True:
            try:
                found.append(self.runs.get(timeout=quiet))
            except queue.Empty:
                return found

    def cpu_seconds(self) -> tuple[float, float]:
        """CPU seconds used so far: this process, its whole tree."""
        process = psutil.Process(self.process.pid)
        own = sum(process.cpu_times()[:2])
        tree = own
        for child in process.children(recursive=True):
            try:
                tree += sum(child.cpu_times()[:2])
            except psutil.NoSuchProcess:
                continue
        return own, tree

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def found(searcher: Searcher, word: str, k: int = 10) -> set[str]:
    """doc_ids of the full-text hits for `word`."""
    return {hit.doc_id for hit in searcher.search(word, SearchParams(k=k, mode="fts"))}


def time_edits(watcher: Watcher, searcher: Searcher, source: Path, n: int) -> list[float]:
    """Seconds from each save to the first query that finds the edit."""
    rng = random.Random(23)
    seconds: list[float] = []
    for i in range(n):
        word = made_up_word(rng)
        with open(source / EDITED, "a", encoding="utf-8") as handle:
            handle.write(f"\n\nEdit {i + 1} of the benchmark saved the word {word}.\n")
        saved = time.perf_counter()
        deadline = saved + SETTLE_S
        while EDITED not in found(searcher, word):
            if time.perf_counter() > deadline:
                raise RuntimeError(f"edit {i + 1} not found after {SETTLE_S} s")
            time.sleep(POLL_S)
        seconds.append(time.perf_counter() - saved)
        watcher.next_run(SETTLE_S)  # the run has finished (its finalize too)
    return seconds


def burst(
    watcher: Watcher, searcher: Searcher, source: Path, uri: str, n: int, quiet: float
) -> dict:
    """Write n files at once; the runs they took and whether every one was applied (no run
    for `quiet` seconds: the burst is over)."""
    rng = random.Random(1000)
    words = {f"{BURST_FOLDER}/note-{i:04d}.md": made_up_word(rng) for i in range(n)}
    watcher.runs_until_quiet(quiet)  # no run of the edits left to come
    started = time.perf_counter()
    for name, word in words.items():
        (source / name).write_text(f"# Note\n\nThis note holds the word {word}.\n", "utf-8")
    written = time.perf_counter() - started
    runs: list[str] = []
    deadline = started + SETTLE_S

    def applied() -> bool:
        ledger = Dataset(uri).ledger()
        return all(
            name in ledger
            and ledger[name].status == Status.INDEXED
            and ledger[name].content_hash == file_sha256(source / name)
            for name in words
        )

    while not applied():
        if time.perf_counter() > deadline:
            raise RuntimeError(f"the burst was not applied after {SETTLE_S} s: {runs}")
        runs.append(watcher.next_run(SETTLE_S))
    seconds = time.perf_counter() - started
    runs += watcher.runs_until_quiet(quiet)  # any run still to come counts too
    every_word = all(found(searcher, word) == {name} for name, word in words.items())
    return {
        "files": n,
        "write_s": round(written, 2),
        "applied_s": round(seconds, 2),
        "runs": len(runs),
        "all_applied": applied() and every_word,
        "run_lines": runs,
    }


def idle_cpu(watcher: Watcher, seconds: float, quiet: float) -> tuple[float, float]:
    """Percent of one core used by the watcher, and by its process tree, over `seconds`
    once no run came for `quiet` seconds."""
    watcher.runs_until_quiet(quiet)
    own, tree = watcher.cpu_seconds()
    start = time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - start
    own_after, tree_after = watcher.cpu_seconds()
    return 100 * (own_after - own) / wall, 100 * (tree_after - tree) / wall


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.watch")
    parser.add_argument("corpus", nargs="?", default=str(ROOT / "data" / "sample"))
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of idle measured")
    parser.add_argument(
        "--smoke", action="store_true", help="1 edit, a burst of 20, 1 s idle, hash embedder"
    )
    args = parser.parse_args()
    corpus, quiet = Path(args.corpus), QUIET_S
    if args.smoke:
        corpus, quiet = ROOT / "data" / "sample", SMOKE_QUIET_S
        args.model, args.edits, args.burst, args.idle = "hash:64", 1, 20, 1.0
    work = Path(tempfile.mkdtemp(prefix="doc-indexer-watch-"))
    os.environ.setdefault("PREFECT_HOME", str(work / "prefect"))  # the watcher's, inherited
    source, uri = work / "source", str(work / "index")
    if args.smoke:
        shutil.copytree(corpus / "rust-book", source / "rust-book")
    else:
        shutil.copytree(corpus, source)
    if not (source / EDITED).is_file():
        raise SystemExit(f"{corpus} has no {EDITED} to edit")
    files = sum(1 for path in source.rglob("*") if path.is_file())
    (source / BURST_FOLDER).mkdir()

    started = time.perf_counter()
    watcher = Watcher(source, uri, args.model, work)
    try:
        reconcile = watcher.next_run(START_S)
        ready = time.perf_counter() - started
        searcher = Searcher(Dataset(uri, consistency=timedelta(0)))  # sees every new version
        found(searcher, "warm")  # the query model loaded before any timing
        edits = time_edits(watcher, searcher, source, args.edits)
        bursted = burst(watcher, searcher, source, uri, args.burst, quiet)
        own, tree = idle_cpu(watcher, args.idle, quiet)
    finally:
        watcher.stop()
        shutil.rmtree(work, ignore_errors=True)

    label = "data/sample/rust-book" if args.smoke else str(corpus)
    print(f"{label}: {files} files, model {args.model}")
    print(f"reconcile at start: {ready:.1f} s to the first run's end ({reconcile})")
    print(
        f"edit to search     median {statistics.median(edits):.2f} s  "
        f"p90 {percentile(edits, 0.9):.2f} s  max {max(edits):.2f} s  over {len(edits)} edits"
    )
    print(
        f"burst              {bursted['files']} files: {bursted['runs']} runs, all applied: "
        f"{bursted['all_applied']}, {bursted['applied_s']:.1f} s (written in "
        f"{bursted['write_s']:.2f} s)"
    )
    print(
        f"idle CPU           watcher {own:.2f} %  process tree {tree:.2f} %  over {args.idle:g} s"
    )
    report = {
        "corpus_files": files,
        "model": args.model,
        "reconcile_s": round(ready, 2),
        "edit_s": [round(s, 3) for s in edits],
        "edit_median_s": round(statistics.median(edits), 3),
        "edit_p90_s": round(percentile(edits, 0.9), 3),
        "burst": bursted,
        "idle_cpu_percent": round(own, 3),
        "idle_cpu_percent_tree": round(tree, 3),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
