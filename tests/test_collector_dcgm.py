"""The dcgm source against a recorded dcgm-exporter payload served over real HTTP."""

import http.server
import logging
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from collectors.dcgm import DcgmSource, is_remote
from collectors.sources import SourceUnavailable
from devtools.redis_server import free_port
from gpulse import schema

RECORDED = (Path(__file__).parent / "data" / "dcgm-exporter.txt").read_text()
HOST = "dgx-h100-017"
MIB = 1024 * 1024
H100_TOTAL = 85520809984  # bytes; what NVML's memory.total says for an H100 80GB HBM3 (81559 MiB)
ROOT = Path(__file__).resolve().parent.parent
XID_48 = 'err_code="48",err_msg="DBE (Double Bit Error) ECC Error"} 48'
# DCGM's blanks (dcgm_structs.h: BLANK, NOT_FOUND, NOT_SUPPORTED, NOT_PERMISSIONED)
# as dcgm-exporter prints them: int32, int64 exactly or as a float, fp64.
BLANK_TEXTS = (
    [str(0x7FFFFFF0 + k) for k in range(4)]
    + [str(0x7FFFFFFFFFFFFFF0 + k) for k in range(4)] + ["9.223372036854776e+18"]
    + [f"{140737488355328.0 + k:f}" for k in range(4)]
)


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


def with_value(text: str, gpu: int, value: str) -> str:
    """Return ``text`` with every series of GPU ``gpu`` set to ``value``."""
    return re.sub(rf'^(\w+{{gpu="{gpu}",.*}}) \S+$', rf"\g<1> {value}", text, flags=re.M)


def with_labels(text: str, gpu: int, labels: str) -> str:
    """Return ``text`` with ``labels`` added to every series of GPU ``gpu``."""
    return re.sub(rf'^(\w+{{gpu="{gpu}",.*)}}', rf"\g<1>,{labels}}}", text, flags=re.M)


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


def test_the_xid_held_at_start_is_a_baseline_and_a_new_code_is_reported_once(exporter):
    source = DcgmSource(exporter.url, interval=1.0)
    # DCGM held 48 before this collector started: a restart must not report it again.
    assert all(gpu["xid"] == [] for gpu in source.sample()[0]["gpus"])
    exporter.body = RECORDED.replace(XID_48, 'err_code="94",err_msg="Contained ECC error"} 94')
    exporter.body = with_value(exporter.body, 5, "31")  # GPU 5 had no Xid at start: 0 -> 31
    gpu = gpus_of(source.sample()[0])
    assert gpu[3]["xid"] == [94] and gpu[5]["xid"] == [31] and gpu[0]["xid"] == []
    assert all(g["xid"] == [] for g in source.sample()[0]["gpus"])  # DCGM still holds them: not new events


def test_the_exporters_xid_counter_is_used_when_served_and_sees_a_repeated_code(exporter):
    labels = ('gpu="3",UUID="GPU-17f8d3b6-c2a4-49e0-8b5f-d0e3a9c6f271",modelName="NVIDIA H100 80GB HBM3",'
              f'Hostname="{HOST}"')

    def with_counts(counts: dict[int, int]) -> str:
        lines = [f'DCGM_EXP_XID_ERRORS_TOTAL{{{labels},xid="{code}"}} {count}' for code, count in counts.items()]
        return RECORDED + "# TYPE DCGM_EXP_XID_ERRORS_TOTAL counter\n" + "\n".join(lines) + "\n"

    source = DcgmSource(exporter.url, interval=1.0)
    exporter.body = with_counts({48: 1})
    assert gpus_of(source.sample()[0])[3]["xid"] == []  # the baseline
    assert gpus_of(source.sample()[0])[3]["xid"] == []
    exporter.body = with_counts({48: 2})  # 48 again: the last-Xid field cannot show it, the count does
    assert gpus_of(source.sample()[0])[3]["xid"] == [48]
    exporter.body = with_counts({48: 2, 13: 1})  # a series that appears counts from 0
    assert gpus_of(source.sample()[0])[3]["xid"] == [13]
    exporter.body = with_counts({48: 2, 13: 1})
    assert gpus_of(source.sample()[0])[3]["xid"] == []


def test_the_first_xid_count_series_of_a_gpu_already_seen_is_an_event(exporter):
    # The exporter serves no count series for a GPU before its first Xid since it started.
    labels = ('gpu="5",UUID="GPU-a2c7e5f1-3b98-4d0c-9e6a-b1f4c8d2e573",modelName="NVIDIA H100 80GB HBM3",'
              f'Hostname="{HOST}"')
    source = DcgmSource(exporter.url, interval=1.0)
    source.sample()
    exporter.body = (with_value(RECORDED, 5, "31") + "# TYPE DCGM_EXP_XID_ERRORS_TOTAL counter\n"
                     f'DCGM_EXP_XID_ERRORS_TOTAL{{{labels},xid="31"}} 1\n')
    gpu = gpus_of(source.sample()[0])
    assert gpu[5]["xid"] == [31] and gpu[3]["xid"] == []


def test_xid_79_marks_the_gpu_lost_with_null_readings_and_keeps_the_others(exporter):
    source = DcgmSource(exporter.url, interval=1.0)
    source.sample()
    exporter.body = RECORDED.replace(XID_48, 'err_code="79",err_msg="GPU has fallen off the bus"} 79')
    gpu = gpus_of(schema.parse(schema.encode(source.sample()[0])))
    assert gpu[3]["lost"] is True and gpu[3]["xid"] == [79]
    assert all(gpu[3][name] is None for name in schema.GPU_METRIC_NAMES + schema.OPTIONAL_GPU_METRIC_NAMES)
    assert gpu[2]["lost"] is False and gpu[2]["power"] == pytest.approx(611.457)


@pytest.mark.parametrize("blank", BLANK_TEXTS)
def test_every_dcgm_blank_value_becomes_null(exporter, blank):
    source = DcgmSource(exporter.url, interval=1.0)
    source.sample()
    exporter.body = with_value(RECORDED, 3, blank)
    [sample] = source.sample()
    gpu = gpus_of(schema.parse(schema.encode(sample)))
    readings = schema.GPU_METRIC_NAMES + schema.OPTIONAL_GPU_METRIC_NAMES
    assert {name: gpu[3].get(name) for name in readings} == dict.fromkeys(readings)
    assert gpu[3]["xid"] == [] and gpu[3]["throttle"] is None and gpu[3]["lost"] is False
    assert gpu[2]["temp"] == 62 and gpu[2]["mem_used"] is not None


def test_new_fields_energy_pcie_replay_memory_temperature(exporter):
    gpu = gpus_of(schema.parse(schema.encode(DcgmSource(exporter.url, interval=1.0).sample()[0])))
    assert gpu[0]["energy"] == 48213775401 and isinstance(gpu[0]["energy"], int)  # mJ
    assert gpu[0]["pcie_replay"] == 0 and gpu[4]["pcie_replay"] == 3
    assert gpu[0]["mem_temp"] == 71 and gpu[6]["mem_temp"] == 33  # °C


def test_the_kubernetes_pod_labels_are_kept_for_attribution(exporter):
    body = with_labels(RECORDED, 2, 'container="trainer",namespace="ml-team",pod="llama-ft-7f9c4-x2k8z"')
    exporter.body = with_labels(body, 5, 'pod_name="old-exporter-pod",pod_namespace="default",container_name=""')
    gpu = gpus_of(schema.parse(schema.encode(DcgmSource(exporter.url, interval=1.0).sample()[0])))
    assert gpu[2]["k8s"] == {"pod": "llama-ft-7f9c4-x2k8z", "namespace": "ml-team", "container": "trainer"}
    assert gpu[5]["k8s"] == {"pod": "old-exporter-pod", "namespace": "default", "container": None}
    assert "k8s" not in gpu[0]  # no pod on it: the field is left out


def test_newer_exporters_lowercase_hostname_label_names_the_node(exporter):
    exporter.body = RECORDED.replace('Hostname="', 'hostname="')
    assert [s["node"] for s in DcgmSource(exporter.url, interval=1.0).sample()] == [HOST]


@pytest.mark.parametrize("url, remote", [
    ("http://localhost:9400/metrics", False), ("http://127.0.0.1:9400/metrics", False),
    ("http://127.0.0.2:9400/metrics", False), ("http://[::1]:9400/metrics", False),
    ("http://gpu-07:9400/metrics", True), ("http://10.0.0.7:9400/metrics", True),
])
def test_which_exporter_urls_are_remote(url, remote):
    assert is_remote(url) is remote


def non_loopback_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.254", 9))  # sends nothing: picks the outgoing interface
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_a_remote_exporter_without_a_hostname_label_is_logged_once(caplog):
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address")
    server = Exporter(("0.0.0.0", 0), Handler)
    server.body = re.sub(r',Hostname="[^"]*"', "", RECORDED)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://{address}:{server.server_address[1]}/metrics"
        source = DcgmSource(url, interval=1.0)
        with caplog.at_level(logging.WARNING, logger="collectors.dcgm"):
            nodes = [s["node"] for _ in range(3) for s in source.sample()]
        assert nodes == [socket.gethostname()] * 3
        [record] = caplog.records
        assert url in record.getMessage() and "no hostname label" in record.getMessage()
        assert "--node-name" in record.getMessage()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="collectors.dcgm"):
            assert [s["node"] for s in DcgmSource(url, interval=1.0, node_name="gpu-07").sample()] == ["gpu-07"]
        assert caplog.records == []
    finally:
        server.shutdown()
        server.server_close()


def test_a_sample_that_breaks_the_contract_is_dropped_and_logged_once_and_other_hosts_kept(exporter, caplog):
    lines = []
    for line in RECORDED.splitlines():
        lines.append(line)
        if not line.startswith("#"):
            lines.append(line.replace(f'Hostname="{HOST}"', 'Hostname="dgx-h100-018"')
                         .replace('modelName="NVIDIA H100 80GB HBM3"', f'modelName="{"H" * 200}"'))
    exporter.body = "\n".join(lines) + "\n"
    source = DcgmSource(exporter.url, interval=1.0)
    with caplog.at_level(logging.INFO, logger="collectors.dcgm"):
        assert [[s["node"] for s in source.sample()] for _ in range(3)] == [[HOST]] * 3
        [record] = caplog.records
        assert "dgx-h100-018" in record.getMessage() and "'name'" in record.getMessage()
        exporter.body = RECORDED.replace(f'Hostname="{HOST}"', 'Hostname="dgx-h100-018"')
        assert [s["node"] for s in source.sample()] == ["dgx-h100-018"]
    assert "valid samples again" in caplog.records[-1].getMessage()


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
    root = ROOT
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


def test_a_long_running_collector_keeps_running_through_blank_and_unencodable_payloads(exporter):
    # Before, a blank FB_USED in MiB overflowed 64 bits once in bytes: the collector died with a traceback.
    exporter.body = with_value(RECORDED, 3, BLANK_TEXTS[4])  # the int64 blank
    process = subprocess.Popen([sys.executable, "-m", "collectors", "--source", "dcgm", "--dcgm-url", exporter.url,
                                "--interval", "0.2", "--stdout"], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    try:
        lines = [process.stdout.readline() for _ in range(2)]
        # A host whose sample the contract rejects: dropped and logged, the collector goes on.
        exporter.body = RECORDED.replace(f'Hostname="{HOST}"', 'Hostname="bad host name"')
        # A slow tick under load may be logged first; "" is the end: the collector died.
        logged = "-"
        while logged and "dropping" not in logged:
            logged = process.stderr.readline().decode()
        exporter.body = with_value(RECORDED, 3, BLANK_TEXTS[-1])  # the fp64 blank
        lines += [process.stdout.readline() for _ in range(2)]
        assert process.poll() is None, "the collector must keep running"
    finally:
        process.terminate()
        out, err = process.communicate(timeout=10)
    assert process.returncode == 0 and "Traceback" not in err.decode(), err.decode()
    assert "dropping the sample of node 'bad host name'" in logged
    samples = [schema.parse(line) for line in lines + out.splitlines()]
    assert len(samples) >= 4 and {s["node"] for s in samples} == {HOST}
    assert all(gpus_of(s)[3]["mem_used"] is None and gpus_of(s)[3]["temp"] is None for s in samples)
    assert all(gpus_of(s)[2]["temp"] == 62 for s in samples)
