"""CPU and memory of the processes under load, read with psutil."""

import threading
import time

import psutil


class ProcessMeter:
    """Follow a group of processes (one role: ingest, web, the collectors ...).

    CPU is the time the group used between start() and stop() over the wall time
    between them, in percent of one core; RSS is the group's summed resident
    memory at the first and the last sample() call (a soak reads whether it
    grew) and its peak over them all.
    """

    def __init__(self, pids: list[int]):
        self.processes = [psutil.Process(pid) for pid in pids]
        self.peak_rss = 0
        self.first_rss: int | None = None
        self.last_rss = 0
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
        if self.first_rss is None:
            self.first_rss = rss
        self.last_rss = rss

    @property
    def cpu_percent(self) -> float:
        assert self._start is not None and self._stop is not None, "read between start() and stop()"
        (t0, cpu0), (t1, cpu1) = self._start, self._stop
        return 100.0 * (cpu1 - cpu0) / (t1 - t0)

    def rss_mb(self) -> dict:
        """The group's RSS in MiB at the start, at the end and at its peak."""
        assert self.first_rss is not None, "read after start()"
        return {name: round(value / 2**20, 1)
                for name, value in (("start", self.first_rss), ("end", self.last_rss), ("peak", self.peak_rss))}


class MemoryMeter:
    """The peak memory of a system: its processes and every process they start (a benchmark job's ranks),
    sampled every ``every`` seconds by a thread of its own between start() and stop().

    Two sums, as smem gives them. RSS counts a page that several processes share (the interpreter,
    Django, torch) once in each of them, so it overstates; PSS splits each shared page among its
    sharers, so the processes' PSS adds up to the memory they take from the machine together.
    """

    def __init__(self, pids: list[int], every: float = 1.0):
        self.roots = [psutil.Process(pid) for pid in pids]
        self.every = every
        self.peak_rss = 0
        self.peak_pss = 0
        self.processes_at_peak = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-meter", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stopping.wait(self.every):
            self.sample()

    def sample(self) -> None:
        rss = pss = count = 0
        for process in self._every_process():
            try:
                memory = process.memory_full_info()
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue  # ended between the listing and the reading
            rss += memory.rss
            pss += memory.pss
            count += 1
        self.peak_rss = max(self.peak_rss, rss)
        if pss > self.peak_pss:
            self.peak_pss, self.processes_at_peak = pss, count

    def _every_process(self) -> list[psutil.Process]:
        found = []
        for root in self.roots:
            try:
                found += [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
        return found

    def result(self) -> dict:
        return {"peak_rss_mib": round(self.peak_rss / 2**20), "peak_pss_mib": round(self.peak_pss / 2**20),
                "processes": self.processes_at_peak}
