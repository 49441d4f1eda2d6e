"""The node's last GPU test results on disk: `workers.healthcheck --record` writes them, the collector reads them.

Slurm's HealthCheckProgram or prolog runs `python -m workers.healthcheck
--quick --record PATH` as root now and then; the collector, which runs all
the time, reports what the last run found of each GPU as the health check
``gpu_tests`` (gpulse/health.py) in every sample, so a GPU that failed its
test is failing on the dashboard until a later run passes it.

The file is JSON, {"v": 1, "ts": unix seconds, "tests": [{"name", "gpu",
"verdict", "reason"}, ...]}, replaced whole (a rename) so a reader never sees
half of it. The collector reads it only when its modification time changes,
and bounds and checks it as it would any input.
"""

import json
import os
import time
from pathlib import Path

from gpulse.health import FAIL, PASS, UNKNOWN
from gpulse.schema import MAX_GPU_INDEX, MAX_REASON, MAX_TS

CHECK = "gpu_tests"
VERSION = 1
MAX_BYTES = 256 * 1024
MAX_TESTS = 2048  # 8 tests of 256 GPUs
VERDICTS = (PASS, FAIL, UNKNOWN)


def write_record(path: Path, tests: list[dict], now: float | None = None) -> None:
    """Replace ``path`` with these test results (workers.gpu_checks' Results as dicts), readable by all."""
    record = {"v": VERSION, "ts": time.time() if now is None else now,
              "tests": [{key: test[key] for key in ("name", "gpu", "verdict", "reason")} for test in tests]}
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(record))
    partial.chmod(0o644)
    partial.replace(path)


class RecordError(ValueError):
    pass


def read_record(raw: bytes) -> tuple[float, list[dict]]:
    """(when it was written, its tests); raise RecordError naming what is wrong."""
    if len(raw) > MAX_BYTES:
        raise RecordError(f"larger than {MAX_BYTES // 1024} KiB")
    try:
        record = json.loads(raw)
    except ValueError as exc:
        raise RecordError(f"not JSON ({exc})") from None
    if type(record) is not dict or record.get("v") != VERSION:
        raise RecordError(f"not a version {VERSION} record")
    written = record.get("ts")
    tests = record.get("tests")
    if not isinstance(written, int | float) or not 0 <= written <= MAX_TS:  # NaN fails the comparison too
        raise RecordError("'ts' is not a unix time")
    if type(tests) is not list or len(tests) > MAX_TESTS:
        raise RecordError(f"'tests' is not a list of at most {MAX_TESTS}")
    for test in tests:
        if (type(test) is not dict or type(test.get("name")) is not str or test.get("verdict") not in VERDICTS
                or type(test.get("reason")) is not str
                or not (test.get("gpu") is None or (type(test["gpu"]) is int and 0 <= test["gpu"] <= MAX_GPU_INDEX))):
            raise RecordError("a test without a name, a GPU index or None, a verdict and a reason")
    return float(written), tests


def _when(written: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(written))


class GpuTestRecord:
    """The findings of the record at ``path``, read again whenever the file changes."""

    def __init__(self, path: Path):
        self.path = path
        self._stamp: tuple[int, int] | None = None  # (mtime_ns, size) of what was read
        self._findings: list[dict] = []

    def findings(self) -> list[dict]:
        """A finding per GPU with a failed or unrun test (node-wide when no GPU is named); a
        missing or bad file is one unknown finding that says so."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._stamp = None
            return [_node_finding(f"no run recorded yet at {self.path}")]
        except OSError as exc:
            self._stamp = None
            return [_node_finding(f"cannot read {self.path}: {exc.strerror}")]
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            self._findings = self._read()
            self._stamp = stamp
        return self._findings

    def _read(self) -> list[dict]:
        try:
            written, tests = read_record(self.path.read_bytes())
        except OSError as exc:
            return [_node_finding(f"cannot read {self.path}: {exc.strerror}")]
        except RecordError as exc:
            return [_node_finding(f"{self.path} is not a GPU test record: {exc}")]
        by_gpu: dict[tuple[int | None, str], list[str]] = {}
        for test in tests:
            if test["verdict"] != PASS:
                by_gpu.setdefault((test["gpu"], test["verdict"]), []).append(f"{test['name']} {test['reason']}")
        return [
            {"check": CHECK, "gpu": gpu, "status": verdict,
             "reason": f"{'; '.join(reasons)} (run {_when(written)})"[:MAX_REASON]}
            for (gpu, verdict), reasons in sorted(by_gpu.items(), key=lambda item: (item[0][0] is None, item[0]))
        ]


def _node_finding(reason: str) -> dict:
    return {"check": CHECK, "gpu": None, "status": UNKNOWN, "reason": reason[:MAX_REASON]}
