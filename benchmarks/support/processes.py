"""Memory of a process and its children, sampled while it runs."""

from __future__ import annotations

import threading

import psutil


class PeakTreeRss:
    """Samples the RSS of this process and all its descendants; keeps the largest sum, and this
    process's own RSS at every sample (to tell growth from a plateau)."""

    def __init__(self, interval: float = 0.2, pid: int | None = None):
        self.peak = 0
        self.own: list[int] = []
        self._pid = pid  # the process whose tree is sampled: this one by default
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process(self._pid)
        while not self._stop.wait(self._interval):
            total = 0
            try:
                tree = [me, *me.children(recursive=True)]
                own = me.memory_info().rss
            except psutil.Error:  # the sampled process has ended
                return
            for process in tree:
                try:
                    total += process.memory_info().rss
                except psutil.Error:  # ended between listing and reading
                    pass
            self.peak = max(self.peak, total)
            self.own.append(own)

    def own_peak_by_quarter(self) -> list[float]:
        """This process's peak RSS (MiB) in each quarter of the sampled time."""
        n = len(self.own)
        quarters = [self.own[n * q // 4 : n * (q + 1) // 4] for q in range(4)]
        return [mib(max(part)) for part in quarters if part]

    def __enter__(self) -> PeakTreeRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def mib(size_bytes: float) -> float:
    return round(size_bytes / 2**20, 1)
