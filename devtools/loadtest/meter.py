"""CPU and memory of the processes under load, read with psutil."""

import time

import psutil


class ProcessMeter:
    """Follow a group of processes (one role: ingest, web, the collectors ...).

    CPU is the time the group used between start() and stop() over the wall time
    between them, in percent of one core; RSS is the peak of the group's summed
    resident memory over the sample() calls.
    """

    def __init__(self, pids: list[int]):
        self.processes = [psutil.Process(pid) for pid in pids]
        self.peak_rss = 0
        self._start: tuple[float, float] | None = None
        self._stop: tuple[float, float] | None = None

    def _cpu_seconds(self) -> float:
        total = 0.0
        for process in self.processes:
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
        return total

    def start(self) -> None:
        self._start = (time.monotonic(), self._cpu_seconds())
        self.sample()

    def stop(self) -> None:
        self.sample()
        self._stop = (time.monotonic(), self._cpu_seconds())

    def sample(self) -> None:
        rss = 0
        for process in self.processes:
            try:
                rss += process.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        self.peak_rss = max(self.peak_rss, rss)

    @property
    def cpu_percent(self) -> float:
        assert self._start is not None and self._stop is not None, "read between start() and stop()"
        (t0, cpu0), (t1, cpu1) = self._start, self._stop
        return 100.0 * (cpu1 - cpu0) / (t1 - t0)

    @property
    def peak_rss_mb(self) -> float:
        return self.peak_rss / 2**20
