"""InfiniBand/RoCE ports read from a sysfs tree recorded in the real format (tests/data/sysfs)."""

import logging
import shutil
from pathlib import Path

import pytest

from collectors import infiniband
from collectors.infiniband import read_ports
from gpulse import schema
from gpulse.ratelog import RateLimitedLog

RECORDED = Path(__file__).resolve().parent / "data" / "sysfs"
UP = {"port": "mlx5_0/1", "state": "ACTIVE", "phys_state": "LinkUp", "rate": 400.0,
      "symbol_error": 0, "link_downed": 1, "port_rcv_errors": 0}
DOWN = {"port": "mlx5_1/1", "state": "DOWN", "phys_state": "Polling", "rate": 10.0,
        "symbol_error": 12, "link_downed": 7, "port_rcv_errors": 3}


@pytest.fixture
def sysfs(tmp_path) -> Path:
    """A writable copy of the recorded tree."""
    copy = tmp_path / "sys"
    shutil.copytree(RECORDED, copy)
    return copy


@pytest.fixture
def fresh_log(monkeypatch):
    """A rate-limited log with nothing logged yet in this window."""
    monkeypatch.setattr(infiniband, "log", RateLimitedLog(logging.getLogger(infiniband.__name__)))


def port_folder(sysfs: Path, device: str = "mlx5_0") -> Path:
    return sysfs / "class" / "infiniband" / device / "ports" / "1"


def test_it_reads_every_port_of_the_recorded_tree():
    assert read_ports(RECORDED) == [UP, DOWN]


def test_the_ports_are_a_valid_ib_list_of_a_sample():
    sample = {"v": 1, "node": "gpu-01", "ts": 1.0, "interval": 1.0, "gpus": [], "ib": read_ports(RECORDED)}

    assert schema.parse(schema.encode(sample))["ib"] == [UP, DOWN]


def test_a_node_without_infiniband_has_no_ports(tmp_path):
    (tmp_path / "class").mkdir()

    assert read_ports(tmp_path) == []
    assert read_ports(tmp_path / "no-such-sysfs") == []


@pytest.mark.parametrize("rate, gbps", [("100 Gb/sec (4X EDR)", 100.0), ("25 Gb/sec (1X EDR)", 25.0),
                                        ("2.5 Gb/sec (1X SDR)", 2.5), ("200 Gb/sec (4X HDR)", 200.0),
                                        ("56 Gb/sec (4X FDR)", 56.0)])
def test_rates_are_read_in_gbps(sysfs, rate, gbps):
    (port_folder(sysfs) / "rate").write_text(rate + "\n")

    assert read_ports(sysfs)[0]["rate"] == gbps


def test_a_missing_file_gives_that_field_null_and_keeps_the_rest(sysfs, caplog):
    (port_folder(sysfs) / "rate").unlink()
    (port_folder(sysfs) / "counters" / "symbol_error").unlink()

    assert read_ports(sysfs) == [{**UP, "rate": None, "symbol_error": None}, DOWN]
    assert caplog.records == []  # a driver that does not offer a file is not a problem to log


def test_a_counter_without_a_performance_agent_is_null_without_a_warning(sysfs, caplog):
    (port_folder(sysfs) / "counters" / "port_rcv_errors").write_text("N/A (no PMA)\n")

    assert read_ports(sysfs)[0]["port_rcv_errors"] is None
    assert caplog.records == []


@pytest.mark.parametrize("name, content, field", [
    ("state", "ACTIVE\n", "state"),
    ("phys_state", "", "phys_state"),
    ("rate", "fast\n", "rate"),
    ("rate", "400 GB/s\n", "rate"),
    ("counters/link_downed", "-1\n", "link_downed"),
    ("counters/symbol_error", "12 errors\n", "symbol_error"),
    ("counters/port_rcv_errors", "\xff\xfe\n", "port_rcv_errors"),
])
def test_a_garbled_file_gives_null_and_a_warning(sysfs, fresh_log, caplog, name, content, field):
    (port_folder(sysfs) / name).write_bytes(content.encode("latin-1"))

    with caplog.at_level(logging.WARNING, logger=infiniband.__name__):
        ports = read_ports(sysfs)

    assert ports == [{**UP, field: None}, DOWN]
    assert len(caplog.records) == 1
    assert str(port_folder(sysfs) / name) in caplog.records[0].getMessage()


def test_an_unreadable_file_gives_null_and_a_warning(sysfs, fresh_log, caplog):
    state = port_folder(sysfs, "mlx5_1") / "state"
    state.unlink()
    state.mkdir()  # reading it fails with EISDIR, as an I/O error would

    with caplog.at_level(logging.WARNING, logger=infiniband.__name__):
        ports = read_ports(sysfs)

    assert ports == [UP, {**DOWN, "state": None}]
    assert "cannot read" in caplog.records[0].getMessage()


def test_a_flood_of_garbled_files_is_logged_a_few_times_only(sysfs, fresh_log, caplog):
    (port_folder(sysfs) / "rate").write_text("garbage\n")

    with caplog.at_level(logging.WARNING, logger=infiniband.__name__):
        for _ in range(100):
            assert read_ports(sysfs)[0]["rate"] is None

    assert len(caplog.records) == 10  # RateLimitedLog's limit per minute


def test_at_most_max_ib_ports_are_read(tmp_path, fresh_log, caplog):
    template = port_folder(RECORDED)
    for device in range(schema.MAX_IB_PORTS // 2 + 1):
        for port in (1, 2):
            shutil.copytree(template, tmp_path / "class" / "infiniband" / f"mlx5_{device:02d}" / "ports" / str(port))

    with caplog.at_level(logging.WARNING, logger=infiniband.__name__):
        ports = read_ports(tmp_path)

    assert len(ports) == schema.MAX_IB_PORTS
    assert ports[0]["port"] == "mlx5_00/1" and ports[-1]["port"] == f"mlx5_{schema.MAX_IB_PORTS // 2 - 1:02d}/2"
    assert "more than 64 ports" in caplog.records[0].getMessage()
