"""A real VictoriaMetrics single node (Debian's victoria-metrics, `make victoria-metrics`), for the long-term
storage tests and devtools/bench_remote_write.py: started on a free loopback port with its data in a folder,
stopped and started again on the same port and data (an outage of the store), and asked through its APIs."""

import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import orjson

from devtools.redis_server import free_port

VICTORIA_METRICS = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"


class VictoriaMetrics:
    def __init__(self, data: Path):
        self.data = data
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.write_url = f"{self.base}/api/v1/write"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.data / "victoria-metrics.log", "ab")
        self.process = subprocess.Popen(
            [VICTORIA_METRICS, f"-storageDataPath={self.data / 'storage'}", f"-httpListenAddr=127.0.0.1:{self.port}",
             # samples of years ago are taken (the history tests write them); queries see what was just written
             "-retentionPeriod=100y", "-search.latencyOffset=0s", "-search.disableCache"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 60
        while True:
            assert self.process.poll() is None, self.log()
            try:
                with urllib.request.urlopen(f"{self.base}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, self.log()
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)
        self.process = None

    def log(self) -> str:
        return (self.data / "victoria-metrics.log").read_text(errors="replace")

    def flush(self) -> None:
        """Make what was written searchable now, not after the second VictoriaMetrics waits."""
        urllib.request.urlopen(f"{self.base}/internal/force_flush", timeout=10).close()

    def query_range(self, query: str, start: float, end: float, step: float) -> list:
        self.flush()
        params = urllib.parse.urlencode({"query": query, "start": start, "end": end, "step": step})
        with urllib.request.urlopen(f"{self.base}/api/v1/query_range?{params}", timeout=10) as response:
            answer = orjson.loads(response.read())
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def export(self, match: str) -> list[dict]:
        """Every raw sample of the series ``match`` selects: {"metric", "values", "timestamps"} per series."""
        self.flush()
        params = urllib.parse.urlencode({"match[]": match})
        with urllib.request.urlopen(f"{self.base}/api/v1/export?{params}", timeout=10) as response:
            return [orjson.loads(line) for line in response.read().splitlines() if line]

    def query(self, query: str, at: float) -> list:
        """An instant PromQL query at ``at`` (seconds since the epoch)."""
        self.flush()
        params = urllib.parse.urlencode({"query": query, "time": at})
        with urllib.request.urlopen(f"{self.base}/api/v1/query?{params}", timeout=60) as response:
            answer = orjson.loads(response.read())
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def metric_names(self) -> list[str]:
        self.flush()
        with urllib.request.urlopen(f"{self.base}/api/v1/label/__name__/values", timeout=10) as response:
            return orjson.loads(response.read())["data"]
