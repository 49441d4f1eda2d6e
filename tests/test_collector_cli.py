"""`python -m collectors` as a real process: output, errors, signals, a Redis outage."""

import ctypes
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from devtools.redis_server import EmbeddedRedis
from gpulse.keys import Keys
from gpulse.schema import parse

ROOT = Path(__file__).resolve().parent.parent
COLLECTOR = [sys.executable, "-m", "collectors"]


def collector(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([*COLLECTOR, *args], cwd=ROOT, capture_output=True, timeout=timeout)


def start_collector(*args: str) -> subprocess.Popen:
    return subprocess.Popen([*COLLECTOR, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def stop(process: subprocess.Popen, sig=signal.SIGTERM) -> tuple[int, str, str]:
    process.send_signal(sig)
    out, err = process.communicate(timeout=10)
    return process.returncode, out.decode(), err.decode()


def wait_for(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_once_stdout_prints_one_valid_sample_per_node():
    result = collector("--source", "simulated", "--nodes", "2", "--gpus-per-node", "8", "--once", "--stdout")
    assert result.returncode == 0, result.stderr.decode()
    samples = [parse(line) for line in result.stdout.splitlines()]
    assert [s["node"] for s in samples] == ["sim-01", "sim-02"]
    assert all(len(s["gpus"]) == 8 for s in samples)
    assert result.stderr == b""


def test_the_collector_never_imports_django():
    probe = (
        "import runpy, sys\n"
        "sys.argv = ['collectors', '--source', 'simulated', '--nodes', '2', '--once', '--stdout']\n"
        "try:\n"
        "    runpy.run_module('collectors', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "sys.stderr.write('modules: ' + ' '.join(sorted(sys.modules)) + '\\n')\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr.decode()
    modules = result.stderr.decode().split("modules: ")[1].split()
    assert "collectors.simulated" in modules and "orjson" in modules
    assert not [m for m in modules if m == "django" or m.startswith("django.")]
    assert len(result.stdout.splitlines()) == 2


def test_faults_from_the_command_line_reach_the_samples():
    result = collector("--source", "simulated", "--nodes", "2", "--once", "--stdout",
                       "--fault", "sim-01/3=lost", "--fault", "sim-02=dead")
    assert result.returncode == 0, result.stderr.decode()
    (sample,) = [parse(line) for line in result.stdout.splitlines()]
    assert sample["node"] == "sim-01" and sample["gpus"][3]["lost"] is True


def test_every_sample_carries_its_health_checked_with_the_expected_gpu_count():
    result = collector("--source", "simulated", "--nodes", "2", "--once", "--stdout", "--expected-gpus", "9",
                       "--fault", "sim-01/3=nvlink_down")
    assert result.returncode == 0, result.stderr.decode()
    samples = {s["node"]: s["health"] for s in map(parse, result.stdout.splitlines())}
    assert "nvlink_state" in samples["sim-01"]["checked"]
    assert {(f["check"], f["gpu"], f["status"]) for f in samples["sim-01"]["findings"]} == {
        ("nvlink_state", 3, "fail"), ("gpu_count", None, "fail")}
    assert samples["sim-02"]["findings"] == [
        {"check": "gpu_count", "gpu": None, "status": "fail", "reason": "8 of 9 GPUs on the bus"}]


@pytest.mark.parametrize("args, message", [
    (["--fault", "sim-01/0=melt"], "unknown fault 'melt'"),
    (["--expected-gpus", "0"], "must be at least 1"),
    (["--fault", "sim-07=hot"], "no node 'sim-07'"),
    (["--fault", "sim-01"], "expected NODE[/GPU]=FAULT"),
    (["--interval", "0"], "must be greater than 0"),
    (["--nodes", "many"], "is not a whole number"),
    (["--energy-interval", "-1"], "must be 0 or more"),
    (["--energy-interval", "nan"], "must be 0 or more"),
    (["--only-node", "sim-09"], "the fleet has no node sim-09 (its nodes: sim-01 to sim-04)"),
    (["--except-node", "gpu-01"], "the fleet has no node gpu-01"),
    (["--mig-node", "sim-09"], "the fleet has no node sim-09 to run MIG (its nodes: sim-01 to sim-04)"),
    (["--mig-node", "sim-01"], "sim-01 holds dana's notebook on a whole GPU"),
])
def test_bad_arguments_exit_2_with_the_reason(args, message):
    result = collector("--source", "simulated", "--once", "--stdout", *args)
    assert result.returncode == 2
    stderr = result.stderr.decode()
    assert message in stderr.splitlines()[-1] and "Traceback" not in stderr


def nvml_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(nvml_present(), reason="this machine has an NVIDIA driver")
def test_once_without_a_driver_exits_2_with_one_line():
    result = collector("--source", "nvml", "--once", "--stdout")
    assert result.returncode == 2
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpulse collector: ") and "NVML" in lines[0]
    assert result.stdout == b""


@pytest.mark.skipif(nvml_present(), reason="this machine has an NVIDIA driver")
def test_without_once_a_missing_driver_is_retried_with_backoff_until_stopped():
    process = start_collector("--source", "nvml", "--stdout")
    # Read up to the fourth retry's line: the collector now sleeps 8 s, so a stop
    # that waited out the backoff would take about 8 s, and one that does not, well under 4.
    before_stop = []
    while not before_stop or "retrying in 8 s" not in before_stop[-1]:
        line = process.stderr.readline().decode()
        assert line, f"the collector exited: {before_stop}"
        before_stop.append(line)
    assert process.poll() is None, "the collector must keep retrying, not exit"
    started = time.monotonic()
    returncode, _, rest = stop(process, signal.SIGINT)
    assert returncode == 0 and time.monotonic() - started < 4, "a stop must not wait out the backoff"
    err = "".join(before_stop) + rest
    delays = [line.rsplit("retrying in ", 1)[1] for line in err.splitlines() if "retrying in" in line]
    assert delays == ["1 s", "2 s", "4 s", "8 s"]  # the delay doubles
    assert "Traceback" not in err


def test_samples_sit_on_the_wall_clock_grid_without_drift():
    process = start_collector("--source", "simulated", "--nodes", "1", "--gpus-per-node", "2",
                              "--interval", "0.5", "--stdout")
    time.sleep(4.2)
    returncode, out, err = stop(process)
    assert returncode == 0, err
    ts = [parse(line)["ts"] for line in out.splitlines()]
    assert len(ts) >= 7
    # The first sample comes at once; the others on whole multiples of the interval
    # (a sampler with its own phase would miss this window 80 % of the time). The
    # median, not each one: a loaded machine wakes the sampler late now and then.
    offsets = [t - round(t / 0.5) * 0.5 for t in ts[1:]]
    assert statistics.median(abs(o) for o in offsets) < 0.1, f"off the grid by {offsets}"


def test_once_into_redis_applies_the_faults_in_the_redis_hash(redis_client, redis_url):
    redis_client.hset(Keys().simulator_faults, mapping={"sim-01/1": "lost", "sim-02": "dead"})
    result = collector("--source", "simulated", "--nodes", "2", "--once", "--redis-url", redis_url)
    assert result.returncode == 0, result.stderr.decode()
    entries = redis_client.xrange(Keys().telemetry_stream("sim-01"))
    assert len(entries) == 1 and not redis_client.exists(Keys().telemetry_stream("sim-02"))
    sample = parse(entries[0][1][b"s"])
    assert sample["node"] == "sim-01" and sample["gpus"][1]["lost"] is True
    assert 1 <= redis_client.ttl(Keys().node("sim-01")) <= 3
    assert not redis_client.exists(Keys().node("sim-02"))


def test_only_and_except_node_split_one_fleet_between_two_collectors():
    """As the demo runs its first node apart: the same fleet, its nodes sent once each."""
    fleet = ("--source", "simulated", "--nodes", "3", "--once", "--stdout", "--seed", "7")
    alone = collector(*fleet, "--only-node", "sim-01")
    rest = collector(*fleet, "--except-node", "sim-01")
    assert alone.returncode == rest.returncode == 0, (alone.stderr.decode(), rest.stderr.decode())
    assert [parse(line)["node"] for line in alone.stdout.splitlines()] == ["sim-01"]
    assert [parse(line)["node"] for line in rest.stdout.splitlines()] == ["sim-02", "sim-03"]
    # Only a simulated fleet has nodes to choose from.
    nvml = collector("--source", "nvml", "--once", "--stdout", "--only-node", "sim-01")
    assert nvml.returncode == 2 and "--only-node applies to --source simulated only" in nvml.stderr.decode()


def test_the_mig_node_runs_mig_instances_in_every_collector_of_the_fleet():
    fleet = ("--source", "simulated", "--nodes", "3", "--once", "--stdout", "--seed", "7", "--mig-node", "sim-03")
    whole = collector(*fleet)
    rest = collector(*fleet, "--except-node", "sim-01")
    assert whole.returncode == rest.returncode == 0, (whole.stderr.decode(), rest.stderr.decode())
    samples = {sample["node"]: sample for sample in map(parse, whole.stdout.splitlines())}
    assert [len(gpu["mig"]) for gpu in samples["sim-03"]["gpus"]] == [4, 4, 7, 2, 4, 4, 7, 2]
    assert all("mig" not in gpu for node in ("sim-01", "sim-02") for gpu in samples[node]["gpus"])
    assert parse(rest.stdout.splitlines()[-1])["gpus"][0]["mig"][0]["profile"] == "3g.40gb"
    nvml = collector("--source", "nvml", "--once", "--stdout", "--mig-node", "sim-03")
    assert nvml.returncode == 2 and "--mig-node applies to --source simulated only" in nvml.stderr.decode()


def test_the_faults_come_through_their_own_url_file_when_the_collectors_user_reads_nothing(redis_client, redis_url,
                                                                                           tmp_path):
    redis_client.hset(Keys().simulator_faults, "sim-01/2", "lost")
    faults_url = tmp_path / "faults-url"
    faults_url.write_text(redis_url + "\n")
    nowhere = EmbeddedRedis().url  # the collector's own URL for the faults would find no hash there
    result = collector("--source", "simulated", "--nodes", "2", "--once", "--only-node", "sim-01",
                       "--redis-url", redis_url, "--faults-url-file", str(faults_url))
    assert result.returncode == 0, result.stderr.decode()
    [entry] = redis_client.xrange(Keys().telemetry_stream("sim-01"))
    assert parse(entry[1][b"s"])["gpus"][2]["lost"] is True
    assert not redis_client.exists(Keys().telemetry_stream("sim-02"))
    missing = collector("--source", "simulated", "--once", "--redis-url", nowhere,
                        "--faults-url-file", str(tmp_path / "missing"))
    assert missing.returncode == 2
    assert "cannot read the Redis URL from" in missing.stderr.decode().splitlines()[-1]


def test_once_reports_when_redis_is_unreachable():
    result = collector("--source", "simulated", "--once", "--redis-url", EmbeddedRedis().url)
    assert result.returncode == 1
    assert result.stderr.decode().splitlines()[-1].endswith("unreachable; the sample was not written")


def test_it_keeps_sampling_through_a_redis_outage_and_delivers_the_backlog():
    server = EmbeddedRedis().start()
    process = start_collector("--source", "simulated", "--nodes", "2", "--gpus-per-node", "2",
                              "--interval", "0.2", "--redis-url", server.url)
    try:
        with redis.Redis.from_url(server.url) as client:
            wait_for(lambda: client.xlen(Keys().telemetry_stream("sim-01")) >= 2)
        server.stop()
        outage_start = time.time()
        time.sleep(3)
        outage_end = time.time()
        assert process.poll() is None, "the collector must survive the outage"
        server.start()
        with redis.Redis.from_url(server.url) as client:
            # The restarted server kept nothing: what it holds was sampled during or after the outage.
            streams = [Keys().telemetry_stream(node) for node in ("sim-01", "sim-02")]
            entries = wait_for(lambda: [parse(f[b"s"]) for stream in streams for _, f in client.xrange(stream)
                                        if parse(f[b"s"])["ts"] > outage_end + 0.5])
            samples = [parse(f[b"s"]) for stream in streams for _, f in client.xrange(stream)]
            assert entries
            assert client.exists(Keys().node("sim-01"))
        during = [s for s in samples if outage_start + 0.3 < s["ts"] < outage_end - 0.3]
        assert len(during) >= 18, "about 2 nodes x 5 samples a second of the outage were buffered"
        ts = [s["ts"] for s in samples if s["node"] == "sim-01"]
        assert ts == sorted(ts), "the backlog is written in order"
    finally:
        returncode, _, err = stop(process)
        server.stop()
    assert returncode == 0, err
    assert len([line for line in err.splitlines() if "unreachable" in line]) == 1
    assert "reachable again" in err


RECORDED = ROOT / "tests" / "data"


def test_the_nvml_source_reads_infiniband_from_sysfs_and_the_host_from_procfs():
    from tests import fake_nvml

    env = fake_nvml.subprocess_env(fake_nvml.config(gpus=2))
    result = subprocess.run([*COLLECTOR, "--source", "nvml", "--node-name", "gpu-07", "--once", "--stdout",
                             "--sysfs", str(RECORDED / "sysfs"), "--procfs", str(RECORDED / "procfs")],
                            cwd=ROOT, env=env, capture_output=True, timeout=60)

    assert result.returncode == 0, result.stderr.decode()
    sample = parse(result.stdout)
    assert [(port["port"], port["state"], port["phys_state"]) for port in sample["ib"]] == [
        ("mlx5_0/1", "ACTIVE", "LinkUp"), ("mlx5_1/1", "DOWN", "Polling")]
    # The recorded node's /proc/meminfo (kB): MemTotal 2113389684, MemAvailable 2010745316.
    assert sample["host"]["mem_total"] == 2113389684 * 1024
    assert sample["host"]["mem_used"] == (2113389684 - 2010745316) * 1024
    assert sample["system"] == {"driver": "550.54.15", "cuda": "12.4"}


def test_the_nodes_group_goes_out_with_its_versions_and_a_bad_name_is_a_usage_error():
    from tests import fake_nvml

    env = fake_nvml.subprocess_env(fake_nvml.config(gpus=1))
    args = [*COLLECTOR, "--source", "nvml", "--node-name", "gpu-07", "--once", "--stdout"]
    result = subprocess.run([*args, "--group", "h100-a"], cwd=ROOT, env=env, capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode()
    assert parse(result.stdout)["system"] == {"driver": "550.54.15", "cuda": "12.4", "group": "h100-a"}

    result = subprocess.run([*args, "--group", "a b"], cwd=ROOT, env=env, capture_output=True, timeout=60)
    assert result.returncode == 2 and "argument --group: 'a b' is not 1-63 letters" in result.stderr.decode()


@pytest.mark.parametrize("flag", ["--sysfs", "--procfs"])
def test_a_sysfs_or_procfs_that_is_not_a_directory_is_a_usage_error(flag, tmp_path):
    result = collector("--source", "nvml", "--once", "--stdout", flag, str(tmp_path / "missing"))

    assert result.returncode == 2
    stderr = result.stderr.decode()
    assert f"argument {flag}: {tmp_path / 'missing'} is not a directory" in stderr.splitlines()[-1]


# Secrets never on a command line (issue 31): /proc/<pid>/cmdline is readable by every user of the node.


def _wrote_a_sample(client: redis.Redis) -> bool:
    return any(b"sim-01" in key for key in client.keys())


def test_the_redis_url_from_a_credentials_file_connects_and_writes(redis_client, redis_url, tmp_path):
    credential = tmp_path / "redis-url"
    credential.write_text(redis_url + "\n")  # as a Kubernetes secret or an editor leaves it
    result = collector("--source", "simulated", "--nodes", "1", "--once", "--redis-url-file", str(credential))
    assert result.returncode == 0, result.stderr.decode()
    assert _wrote_a_sample(redis_client)
    assert redis_url.encode() not in result.stderr


def test_the_redis_url_file_named_by_the_environment_connects_and_writes(redis_client, redis_url, tmp_path):
    credential = tmp_path / "redis-url"
    credential.write_text(redis_url)
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    result = subprocess.run([*COLLECTOR, "--source", "simulated", "--nodes", "1", "--once"], cwd=ROOT,
                            env={**env, "GPULSE_REDIS_URL_FILE": str(credential)}, capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr.decode()
    assert _wrote_a_sample(redis_client)


@pytest.mark.parametrize("content", [None, "", "  \n", "not-a-url"])
@pytest.mark.parametrize("how", ["flag", "environment"])
def test_a_missing_empty_or_wrong_credentials_file_is_one_line_and_exit_2(tmp_path, content, how):
    credential = tmp_path / "redis-url"
    if content is not None:
        credential.write_text(content)
    args = [*COLLECTOR, "--source", "simulated", "--once"]
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    if how == "flag":
        args += ["--redis-url-file", str(credential)]
    else:
        env["GPULSE_REDIS_URL_FILE"] = str(credential)
    result = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, timeout=30)
    assert result.returncode == 2
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpulse collector: ") and str(credential) in lines[0], lines
    assert result.stdout == b""


def test_a_password_on_the_command_line_is_warned_about_and_never_repeated(redis_client, redis_url):
    with_password = redis_url.replace("redis://", "redis://:s3cret-word@")
    result = collector("--source", "simulated", "--once", "--stdout", "--redis-url", with_password)
    assert result.returncode == 0
    stderr = result.stderr.decode()
    assert "/proc/<pid>/cmdline" in stderr and "--redis-url-file" in stderr
    assert "s3cret-word" not in stderr
    # Without a password, as in a test or the demo, nothing to warn about.
    assert b"cmdline" not in collector("--source", "simulated", "--once", "--stdout",
                                       "--redis-url", redis_url).stderr


def test_the_url_and_the_file_together_are_a_usage_error(tmp_path):
    result = collector("--source", "simulated", "--once", "--stdout", "--redis-url", "redis://x",
                       "--redis-url-file", str(tmp_path / "f"))
    assert result.returncode == 2 and "not allowed with argument" in result.stderr.decode()
