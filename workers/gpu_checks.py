"""Per-GPU checks: device memory, PCIe both ways and bf16 matmul, measured and judged per GPU model.

What each measures, as the tools operators compare with measure it:
- ``memory_bandwidth``: a device-to-device copy of a 1 GiB tensor, counted as
  bytes read plus bytes written (BabelStream's Copy), against the model's HBM
  or GDDR bandwidth.
- ``host_to_device`` / ``device_to_host``: a copy of 256 MiB between pinned
  host memory and the GPU on a copy engine, bytes over time in one direction
  (nvbandwidth's host_to_device_memcpy_ce / device_to_host_memcpy_ce), against
  the PCIe link's rate per direction.
- ``matmul_bf16``: an 8192 × 8192 × 8192 bf16 matmul, 2n³ flops over time
  (as a burn-in counts them), against the model's dense (no sparsity) peak.

CUDA events time each GPU iteration; perf_counter times the CPU counterparts
(``memory_bandwidth`` of a tensor copy, ``matmul_fp32``), which run the same
plumbing on machines without a GPU and have no reference figure (verdict
unknown). Each check warms up, then reports the median of its timed iterations.
"""

import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from gpulse.health import FAIL, PASS, UNKNOWN
from workers.errors import in_a_line

GB = 1e9  # GB/s and TFLOPS are decimal, as datasheets and nvbandwidth give them
MIB = 1 << 20

# A GPU passes when it reaches this fraction of its model's published figure. The
# published figures are theoretical: a healthy GPU measures below them (cuBLAS
# reaches about 60-80 % of the dense peak, a copy kernel 80-90 % of the memory
# bandwidth, a copy engine 80-90 % of the link), and a faulty one far below (a
# GPU held at its power brake or thermal slowdown, a link trained at x8: 50 %).
MATMUL_FLOOR = 0.5
MEMORY_FLOOR = 0.6
PCIE_FLOOR = 0.6

# PCIe throughput per lane and direction in GB/s, after line encoding (8b/10b up to
# Gen2, 128b/130b from Gen3; Gen6's FLIT mode with its FEC and CRC overhead), from
# the PCI-SIG base specifications 1.0-6.0.
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


@dataclass(frozen=True)
class GpuModel:
    name: str  # the product name as NVML and torch give it, less the "NVIDIA " in front
    bf16_tflops: float  # dense peak (the datasheets' "with sparsity" figure halved)
    memory_gbs: float
    pcie_gen: int  # the GPU's own PCIe generation, at x16


# From NVIDIA's datasheets: H100 Tensor Core GPU (SXM5, PCIe and NVL columns), H200 Tensor
# Core GPU (SXM and NVL), A100 Tensor Core GPU (40 and 80 GB, SXM4 and PCIe), L40S, L40,
# L4 and A10. Dense bf16 is the "BF16 Tensor Core" line without sparsity.
MODELS = (
    GpuModel("H100 80GB HBM3", 989.0, 3350.0, 5),  # H100 SXM5
    GpuModel("H100 PCIe", 756.0, 2000.0, 5),
    GpuModel("H100 NVL", 835.0, 3900.0, 5),
    GpuModel("H200", 989.0, 4800.0, 5),  # H200 SXM
    GpuModel("H200 NVL", 835.0, 4800.0, 5),
    GpuModel("A100-SXM4-80GB", 312.0, 2039.0, 4),
    GpuModel("A100-SXM4-40GB", 312.0, 1555.0, 4),
    GpuModel("A100 80GB PCIe", 312.0, 1935.0, 4),
    GpuModel("A100-PCIE-40GB", 312.0, 1555.0, 4),
    GpuModel("L40S", 362.0, 864.0, 4),
    GpuModel("L40", 181.0, 864.0, 4),
    GpuModel("L4", 121.0, 300.0, 4),
    GpuModel("A10", 125.0, 600.0, 4),
)
_BY_NAME = {model.name: model for model in MODELS}


def model_of(name: str) -> GpuModel | None:
    """The model of a product name ("NVIDIA H100 80GB HBM3"), matched whole: "L40" is not "L40S"."""
    return _BY_NAME.get(re.sub(r"^NVIDIA ", "", name.strip()))


@dataclass(frozen=True)
class Link:
    """A PCIe link: the generation and width the GPU and its slot can train to (NVML's maximums)."""

    gen: int
    width: int

    @property
    def gbs(self) -> float | None:
        lane = PCIE_LANE_GBS.get(self.gen)
        return None if lane is None else lane * self.width


@dataclass(frozen=True)
class Result:
    name: str
    gpu: int | None  # the GPU's index (NVML's, as the health checks name GPUs); None on the CPU
    value: float | None  # None when the check did not run
    unit: str
    verdict: str  # PASS, FAIL or UNKNOWN
    reason: str


@dataclass(frozen=True)
class Effort:
    warmup: int
    iters: int


# Quick: a few seconds per GPU, for a Slurm HealthCheckProgram or prolog. Full: long enough
# for clocks and temperatures to settle, as a burn-in does.
QUICK = Effort(warmup=10, iters=20)
FULL = Effort(warmup=100, iters=500)

COPY_BYTES = 1 << 30
PCIE_BYTES = 256 * MIB
MATMUL_N = 8192
CPU_COPY_BYTES = 64 * MIB
CPU_MATMUL_N = 512


def judge(value: float, reference: float, floor: float, unit: str, what: str) -> tuple[str, str]:
    """Return (verdict, reason) for ``value`` against ``floor`` × ``reference``, ``what`` naming the reference."""
    verdict = PASS if value >= floor * reference else FAIL
    share = f"{value / reference:.0%} of {what} of {reference:g} {unit}"
    return verdict, f"{value:.1f} {unit}, {share} (passes at {floor:.0%})"


def unjudged(value: float, unit: str) -> tuple[str, str]:
    return UNKNOWN, f"{value:.1f} {unit}; no published figure for this GPU model: measured only"


def judge_matmul(tflops: float, model: GpuModel | None) -> tuple[str, str]:
    if model is None:
        return unjudged(tflops, "TFLOPS")
    return judge(tflops, model.bf16_tflops, MATMUL_FLOOR, "TFLOPS", f"the {model.name}'s dense bf16 peak")


def judge_memory(gbs: float, model: GpuModel | None) -> tuple[str, str]:
    if model is None:
        return unjudged(gbs, "GB/s")
    return judge(gbs, model.memory_gbs, MEMORY_FLOOR, "GB/s", f"the {model.name}'s memory bandwidth")


def judge_pcie(gbs: float, model: GpuModel | None, link: Link | None) -> tuple[str, str]:
    """Against ``link`` (what NVML says the GPU and slot can train to), else the model's own generation at x16.

    The link first: an H100 in a Gen4 server trains to Gen4 by design, which is no fault.
    """
    if link is None and model is not None:
        link = Link(model.pcie_gen, 16)
    if link is None or link.gbs is None:
        return unjudged(gbs, "GB/s")
    return judge(gbs, link.gbs, PCIE_FLOOR, "GB/s", f"PCIe Gen{link.gen} x{link.width}'s rate per direction")


def _median_seconds(step: Callable[[], object], effort: Effort, device: torch.device) -> float:
    for _ in range(effort.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        events = []
        for _ in range(effort.iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            events.append((start, end))
        torch.cuda.synchronize(device)
        return statistics.median(start.elapsed_time(end) for start, end in events) / 1e3
    times = []
    for _ in range(effort.iters):
        began = time.perf_counter()
        step()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def copy_gbs(nbytes: int, effort: Effort, device: torch.device) -> float:
    """GB/s of a copy within ``device``'s memory, bytes read plus bytes written."""
    # Filled: untouched host pages all read as the kernel's one zero page, which is no measure of memory.
    source = torch.full((nbytes,), 1, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    seconds = _median_seconds(lambda: target.copy_(source), effort, device)
    return 2 * nbytes / seconds / GB


def host_to_device_gbs(nbytes: int, effort: Effort, device: torch.device) -> float:
    host = torch.full((nbytes,), 1, dtype=torch.uint8, pin_memory=True)
    target = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return nbytes / _median_seconds(lambda: target.copy_(host, non_blocking=True), effort, device) / GB


def device_to_host_gbs(nbytes: int, effort: Effort, device: torch.device) -> float:
    source = torch.full((nbytes,), 1, dtype=torch.uint8, device=device)
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    return nbytes / _median_seconds(lambda: host.copy_(source, non_blocking=True), effort, device) / GB


def matmul_flops(n: int, dtype: torch.dtype, effort: Effort, device: torch.device) -> float:
    """Flops per second of an n × n by n × n matmul (2n³ flops)."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    out = torch.empty(n, n, dtype=dtype, device=device)
    return 2 * n**3 / _median_seconds(lambda: torch.mm(a, b, out=out), effort, device)


def cuda_missing() -> str | None:
    """Why the CUDA checks cannot run here, or None when they can."""
    if not torch.cuda.is_available():
        build = "a CPU-only torch build" if torch.version.cuda is None else f"torch built for CUDA {torch.version.cuda}"
        return f"torch sees no CUDA device ({build})"
    return None


def cuda_ordinals() -> dict[str, int]:
    """Each visible CUDA device's ordinal by its UUID as NVML writes it ("GPU-…", in lower case).

    CUDA numbers devices fastest first unless CUDA_DEVICE_ORDER says otherwise, and
    CUDA_VISIBLE_DEVICES renumbers them; NVML numbers them in PCI bus order. The UUID
    is the same in both.
    """
    return {
        f"GPU-{torch.cuda.get_device_properties(ordinal).uuid}".lower(): ordinal
        for ordinal in range(torch.cuda.device_count())
    }


CUDA_CHECKS = ("memory_bandwidth", "host_to_device", "device_to_host", "matmul_bf16")
_UNITS = {
    "memory_bandwidth": "GB/s",
    "host_to_device": "GB/s",
    "device_to_host": "GB/s",
    "matmul_bf16": "TFLOPS",
    "matmul_fp32": "GFLOPS",
}


def not_run(gpu: int | None, reason: str, names: tuple[str, ...] = CUDA_CHECKS) -> list[Result]:
    """An unknown result per check, each saying why it did not run."""
    return [Result(name, gpu, None, _UNITS[name], UNKNOWN, f"not run: {reason}") for name in names]


def check_gpu(ordinal: int, gpu: int, link: Link | None = None, effort: Effort = QUICK) -> list[Result]:
    """Run the CUDA checks on CUDA device ``ordinal``, reported as GPU ``gpu``.

    Memory held by others makes the remaining checks unknown; any other CUDA error
    fails the check that met it and ends the GPU's checks (its context is gone).
    """
    device = torch.device("cuda", ordinal)
    model = model_of(torch.cuda.get_device_name(device))
    checks: dict[str, tuple[Callable[[], float], Callable[[float], tuple[str, str]]]] = {
        "memory_bandwidth": (lambda: copy_gbs(COPY_BYTES, effort, device), lambda gbs: judge_memory(gbs, model)),
        "host_to_device": (
            lambda: host_to_device_gbs(PCIE_BYTES, effort, device),
            lambda gbs: judge_pcie(gbs, model, link),
        ),
        "device_to_host": (
            lambda: device_to_host_gbs(PCIE_BYTES, effort, device),
            lambda gbs: judge_pcie(gbs, model, link),
        ),
        "matmul_bf16": (
            lambda: matmul_flops(MATMUL_N, torch.bfloat16, effort, device) / 1e12,
            lambda tflops: judge_matmul(tflops, model),
        ),
    }
    names = tuple(checks)
    results: list[Result] = []
    with torch.cuda.device(device):
        for position, (name, (measure, judge_value)) in enumerate(checks.items()):
            try:
                value = measure()
            except torch.cuda.OutOfMemoryError:
                results += not_run(gpu, "its memory is in use", names[position:])
                break
            except RuntimeError as exc:  # a CUDA error: Xid, ECC, a hung or lost GPU
                results.append(Result(name, gpu, None, _UNITS[name], FAIL, in_a_line(exc, with_type=False)))
                results += not_run(gpu, f"{name} failed", names[position + 1 :])
                break
            results.append(Result(name, gpu, value, _UNITS[name], *judge_value(value)))
            torch.cuda.empty_cache()  # the next check gets the memory this one held
    return results


CPU_REASON = "the CPU counterpart, measured only"


def check_cpu(effort: Effort = QUICK) -> list[Result]:
    """The CPU counterparts: a tensor copy's bandwidth and an fp32 matmul's GFLOPS (verdict unknown)."""
    cpu = torch.device("cpu")
    gbs = copy_gbs(CPU_COPY_BYTES, effort, cpu)
    gflops = matmul_flops(CPU_MATMUL_N, torch.float32, effort, cpu) / 1e9
    return [
        Result("memory_bandwidth", None, gbs, "GB/s", UNKNOWN, f"{gbs:.1f} GB/s; {CPU_REASON}"),
        Result("matmul_fp32", None, gflops, "GFLOPS", UNKNOWN, f"{gflops:.1f} GFLOPS; {CPU_REASON}"),
    ]
