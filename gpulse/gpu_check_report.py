"""A GPU check run: what the control host asks of a node and what the node's worker answers.

The control host sends each node of a run GPU_CHECKS_TASK (gpulse/celery_contract.py) with the run's
key (run_key) and whether to run quick. The node's worker runs `python -m workers.healthcheck --json`
and writes on its own events stream of the run (gpulse/job_events.py, the run's key as the job id):
``started``, then

  node_done  {"kind": "node_done", "node", "status", "reason", "report"}

``status`` is succeeded when the healthcheck judged the node (healthy or not: ``report["exit"]`` says
which), failed when it could not (``reason`` says why, ``report`` is None), cancelled when asked to
stop. ``report`` is the healthcheck's JSON object; clean_report() is the control side's check of it,
as of any input from a node: shapes, bounds, nothing it does not name.
"""

import math
import re

from gpulse.health import STATUSES
from gpulse.job_status import JobStatus
from gpulse.schema import MAX_GPU_INDEX, MAX_REASON

RUN_KEY = re.compile(r"gpu-checks-([1-9][0-9]{0,17})")
# A quick run keeps under 30 s on the node (workers/healthcheck.py); a full one tests each GPU for tens
# of seconds, one GPU after another.
QUICK_TIMEOUT_S = 60
FULL_TIMEOUT_S = 1800
HEALTHY, UNHEALTHY = 0, 1  # the healthcheck's exit statuses of a node it judged
NODE_STATUSES = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
MAX_ITEMS = 4096  # findings or tests: 16 of 256 GPUs
NAME = re.compile(r"[a-z0-9_]{1,64}")  # a check's or a test's: pcie_link, matmul_bf16
MAX_UNIT = 16
MAX_SECONDS = 86400.0


class ReportError(ValueError):
    pass


def run_key(run_id: int) -> str:
    """The run's name among the job ids of the events streams, claim and cancel keys (gpulse/keys.py)."""
    return f"gpu-checks-{run_id}"


def run_id_of(key) -> int | None:
    """The run's id from its key, None for anything that is not a run key."""
    found = RUN_KEY.fullmatch(key) if isinstance(key, str) else None
    return int(found.group(1)) if found else None


def timeout_s(quick: bool) -> int:
    return QUICK_TIMEOUT_S if quick else FULL_TIMEOUT_S


def _text(value, limit: int, what: str) -> str:
    if not isinstance(value, str):
        raise ReportError(f"{what} is not text")
    return value[:limit]


def _name(value, what: str) -> str:
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise ReportError(f"{what} {str(value)[:80]!r} is not a name (a-z, 0-9 and _)")
    return value


def _gpu(value) -> int | None:
    if value is None or (type(value) is int and 0 <= value <= MAX_GPU_INDEX):
        return value
    raise ReportError(f"a GPU index {value!r} is not None or 0-{MAX_GPU_INDEX}")


def _number(value) -> float | None:
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value):
        raise ReportError(f"a value {value!r} is not a finite number")
    return float(value)


def _items(report: dict, name: str) -> list:
    items = report.get(name)
    if type(items) is not list or len(items) > MAX_ITEMS:
        raise ReportError(f"{name!r} is not a list of at most {MAX_ITEMS}")
    if not all(type(item) is dict for item in items):
        raise ReportError(f"{name!r} holds something that is not an object")
    return items


def _finding(finding: dict) -> dict:
    status = finding.get("status")
    if status not in STATUSES:
        raise ReportError(f"a finding's status {status!r} is not one of {', '.join(STATUSES)}")
    # A check of the catalogue, the healthcheck's own nvml_read, or a failed per-GPU test (matmul_bf16).
    return {"check": _name(finding.get("check"), "a finding's check"), "gpu": _gpu(finding.get("gpu")),
            "status": status, "reason": _text(finding.get("reason"), MAX_REASON, "a finding's reason")}


def _test(test: dict) -> dict:
    verdict = test.get("verdict")
    if verdict not in STATUSES:
        raise ReportError(f"a test's verdict {verdict!r} is not one of {', '.join(STATUSES)}")
    return {"name": _name(test.get("name"), "a test's name"), "gpu": _gpu(test.get("gpu")),
            "value": _number(test.get("value")), "unit": _text(test.get("unit"), MAX_UNIT, "a test's unit"),
            "verdict": verdict, "reason": _text(test.get("reason"), MAX_REASON, "a test's reason")}


def clean_report(report) -> dict:
    """The healthcheck's report as the control host keeps it; raise ReportError naming what is wrong."""
    if type(report) is not dict:
        raise ReportError("not a JSON object")
    if report.get("exit") not in (HEALTHY, UNHEALTHY) or type(report["exit"]) is not int:
        raise ReportError(f"'exit' {report.get('exit')!r} is not {HEALTHY} or {UNHEALTHY}")
    gpus = report.get("gpus")
    if type(gpus) is not int or not 0 <= gpus <= MAX_GPU_INDEX + 1:
        raise ReportError(f"'gpus' {gpus!r} is not a GPU count")
    seconds = _number(report.get("seconds"))
    if seconds is None or not 0 <= seconds <= MAX_SECONDS:
        raise ReportError(f"'seconds' {report.get('seconds')!r} is not a duration")
    return {"exit": report["exit"], "gpus": gpus, "seconds": seconds,
            "findings": [_finding(finding) for finding in _items(report, "findings")],
            "tests": [_test(test) for test in _items(report, "tests")]}
