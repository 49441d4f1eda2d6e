"""The dcgm source against a recorded dcgm-exporter payload served over real HTTP."""

import http.server
import socket
import threading
from pathlib import Path

import pytest

from collectors.dcgm import DcgmSource
from collectors.sources import SourceUnavailable
from devtools.redis_server import free_port
from gpulse import schema

RECORDED = (Path(__file__).parent / "data" / "dcgm-exporter.txt").read_text()
HOST = "dgx-h100-017"
MIB = 1024 * 1024
H100_TOTAL = 85520809984  # bytes; what NVML's memory.total says for an H100 80GB HBM3 (81559 MiB)


class Exporter(http.server.ThreadingHTTPServer):
    """A stand-in dcgm-exporter: answers GET /metrics with ``body`` and ``status``."""

    body = RECORDED
    status = 200


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        data = self.server.body.encode()
        self.send_response(self.server.status)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def exporter():
    server = Exporter(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    yield server
    server.shutdown()
    server.server_close()


def gpus_of(sample: dict) -> dict[int, dict]:
    return {gpu["index"]: gpu for gpu in sample["gpus"]}


def test_the_recorded_payload_becomes_one_valid_v1_sample_per_host(exporter):
    samples = DcgmSource(exporter.url, interval=1.0).sample()
    assert [s["node"] for s in samples] == [HOST]
    sample = schema.parse(schema.encode(samples[0]))
    assert sample["v"] == 1 and sample["interval"] == 1.0 and sample["host"] is None
    assert [gpu["index"] for gpu in sample["gpus"]] == list(range(8))
    gpu0 = sample["gpus"][0]
    assert gpu0["uuid"] == "GPU-3d6a5b1e-9f0c-4e21-b7a8-61c2f0d94e15"
    assert gpu0["name"] == "NVIDIA H100 80GB HBM3"
    assert set(schema.GPU_METRIC_NAMES) <= set(gpu0)


def test_units_match_the_nvml_source(exporter):
    gpu = gpus_of(DcgmSource(exporter.url, interval=1.0).sample()[0])
    g0, g1 = gpu[0], gpu[1]
    assert g0["util"] == 100 and g0["mem_util"] == 58  # %
    assert g0["mem_used"] == 74211 * MIB  # FB_USED MiB -> bytes
    assert g0["mem_total"] == H100_TOTAL  # used + free + reserved, as NVML's v2 total
    assert g0["temp"] == 64  # °C
    assert g0["power"] == pytest.approx(652.318) and isinstance(g0["power"], float)  # W
    assert g0["power_limit"] == 700.0 and isinstance(g0["power_limit"], float)  # W
    assert g0["sm_clock"] == 1980 and g1["sm_clock"] == 1755 and g0["mem_clock"] == 2619  # MHz
    assert g0["pcie_tx"] == 1289731584 and g0["pcie_rx"] == 3421798400  # bytes/s
    assert g0["nvlink_tx"] == 151287324672 and g0["nvlink_rx"] == 151298138112  # bytes/s
    assert g0["ecc_uncorrected"] == 0 and gpu[3]["ecc_uncorrected"] == 2
    assert g0["throttle"] == [] and g1["throttle"] == ["sw_power_cap"] and gpu[6]["throttle"] == ["gpu_idle"]


def test_readings_the_exporter_does_not_serve_are_null_never_zero(exporter):
    gpu = gpus_of(DcgmSource(exporter.url, interval=1.0).sample()[0])
    assert gpu[0]["fan"] is None  # not among the exporter's counters
    assert gpu[6]["ecc_uncorrected"] is None  # ECC off: DCGM has no value, the exporter skips the series
    assert gpu[6]["util"] == 0  # a real zero stays zero
    assert all(g["processes"] is None for g in gpu.values())


def test_an_xid_is_reported_once_when_it_appears(exporter):
    source = DcgmSource(exporter.url, interval=1.0)
    first = gpus_of(source.sample()[0])
    assert first[3]["xid"] == [48] and first[0]["xid"] == []
    assert gpus_of(source.sample()[0])[3]["xid"] == []  # DCGM still holds 48: not a new event
    exporter.body = RECORDED.replace('err_code="48",err_msg="DBE (Double Bit Error) ECC Error"} 48',
                                     'err_code="94",err_msg="Contained ECC error"} 94')
    assert gpus_of(source.sample()[0])[3]["xid"] == [94]


def test_xid_79_marks_the_gpu_lost_with_null_readings_and_keeps_the_others(exporter):
    exporter.body = RECORDED.replace('err_code="48",err_msg="DBE (Double Bit Error) ECC Error"} 48',
                                     'err_code="79",err_msg="GPU has fallen off the bus"} 79')
    gpu = gpus_of(schema.parse(schema.encode(DcgmSource(exporter.url, interval=1.0).sample()[0])))
    assert gpu[3]["lost"] is True and gpu[3]["xid"] == [79]
    assert all(gpu[3][name] is None for name in schema.GPU_METRIC_NAMES)
    assert gpu[2]["lost"] is False and gpu[2]["power"] == pytest.approx(611.457)


def test_a_multi_host_exporter_gives_one_sample_per_hostname(exporter):
    lines = []
    for line in RECORDED.splitlines():
        lines.append(line)
        if not line.startswith("#"):
            lines.append(line.replace(f'Hostname="{HOST}"', 'Hostname="dgx-h100-018"'))
    exporter.body = "\n".join(lines) + "\n"
    samples = DcgmSource(exporter.url, interval=2.0).sample()
    assert sorted(s["node"] for s in samples) == [HOST, "dgx-h100-018"]
    assert all(len(s["gpus"]) == 8 and s["interval"] == 2.0 for s in samples)
    with pytest.raises(SourceUnavailable, match="serves 2 hosts .*single-host"):
        DcgmSource(exporter.url, interval=1.0, node_name="gpu-01").sample()


def test_a_node_name_overrides_the_hostname_label(exporter):
    samples = DcgmSource(exporter.url, interval=1.0, node_name="gpu-01").sample()
    assert [s["node"] for s in samples] == ["gpu-01"] and len(samples[0]["gpus"]) == 8


def test_older_pcie_fields_in_kib_per_second_and_fb_total(exporter):
    labels = 'gpu="0",UUID="GPU-a",device="nvidia0",modelName="NVIDIA A100-SXM4-40GB",Hostname="a100-1"'
    exporter.body = (
        "# TYPE DCGM_FI_DEV_PCIE_TX_THROUGHPUT counter\n"
        f"DCGM_FI_DEV_PCIE_TX_THROUGHPUT{{{labels}}} 2048\n"
        "# TYPE DCGM_FI_DEV_FB_TOTAL gauge\n"
        f"DCGM_FI_DEV_FB_TOTAL{{{labels}}} 40960\n"
        "# TYPE DCGM_FI_DEV_CLOCK_THROTTLE_REASONS gauge\n"
        f"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{{{labels}}} 96\n"
        # A MIG instance's series describes a slice, not the GPU: skipped.
        "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        f'DCGM_FI_DEV_FB_USED{{{labels},GPU_I_PROFILE="1g.5gb",GPU_I_ID="3"}} 1000\n'
    )
    gpu = DcgmSource(exporter.url, interval=1.0).sample()[0]["gpus"][0]
    assert gpu["pcie_tx"] == 2048 * 1024 and gpu["pcie_rx"] is None
    assert gpu["mem_total"] == 40960 * MIB and gpu["mem_used"] is None
    assert gpu["throttle"] == ["sw_thermal_slowdown", "hw_thermal_slowdown"]


def test_an_unreachable_endpoint_is_one_line_source_unavailable():
    url = f"http://127.0.0.1:{free_port()}/metrics"
    with pytest.raises(SourceUnavailable) as caught:
        DcgmSource(url, interval=1.0).sample()
    message = str(caught.value)
    assert message.startswith(f"dcgm: cannot read {url}: ") and "refused" in message and "\n" not in message


def test_http_errors_and_other_payloads_are_one_line_source_unavailable(exporter):
    exporter.status = 503
    with pytest.raises(SourceUnavailable, match=r"^dcgm: .* answered HTTP 503"):
        DcgmSource(exporter.url, interval=1.0).sample()
    exporter.status = 200
    exporter.body = "<html><body>login</body></html>\n"
    with pytest.raises(SourceUnavailable, match=r"^dcgm: .*not Prometheus text format") as caught:
        DcgmSource(exporter.url, interval=1.0).sample()
    assert "\n" not in str(caught.value)
    exporter.body = "# TYPE node_load1 gauge\nnode_load1 0.5\n"
    with pytest.raises(SourceUnavailable, match="serves no DCGM GPU fields"):
        DcgmSource(exporter.url, interval=1.0).sample()


def test_a_hung_exporter_times_out():
    with socket.socket() as listener:  # accepts the connection, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"
        with pytest.raises(SourceUnavailable, match="timed out"):
            DcgmSource(url, interval=1.0, timeout=0.3).sample()


def test_the_collector_cli_reads_an_exporter_end_to_end(exporter):
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-m", "collectors", "--source", "dcgm", "--dcgm-url", exporter.url,
                           "--once", "--stdout"], cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and schema.parse(lines[0])["node"] == HOST
    exporter.shutdown()
    exporter.server_close()
    gone = subprocess.run([sys.executable, "-m", "collectors", "--source", "dcgm", "--dcgm-url", exporter.url,
                           "--once", "--stdout"], cwd=root, capture_output=True, text=True, timeout=60)
    assert gone.returncode == 2 and gone.stdout == ""
    assert len(gone.stderr.strip().splitlines()) == 1 and "Traceback" not in gone.stderr
