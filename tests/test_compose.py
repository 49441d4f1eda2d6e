"""docker-compose.yml, the Dockerfile and .env.example, checked by structure (no Docker engine here)."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from collectors.cli import build_parser
from dashboard.settings import UPLOT_DIST
from gpulse.keys import Keys
from tests.test_redis_acl import acl, acl_redis, acl_server  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_TEXT = (ROOT / "docker-compose.yml").read_text()
COMPOSE = yaml.safe_load(COMPOSE_TEXT)
SERVICES = COMPOSE["services"]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
CONTROL = ("web", "ingest", "control-worker", "webhooks", "beat")
GPU_NODE = ("collector", "node-worker")
# Control-host services started only under their profile.
OPTIONAL = ("scheduler",)
LONG_RUNNING = ("redis", "postgres", *CONTROL, *OPTIONAL, *GPU_NODE)
# Compose interpolation, ${NAME...}; $${...} is escaped for the container's shell.
INTERPOLATED = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)")
SECRET_NAMES = re.compile(r"PASSWORD|SECRET|TOKEN|_URL$|AUTH")


def command(service: str) -> str:
    cmd = SERVICES[service]["command"]
    return cmd if isinstance(cmd, str) else " ".join(cmd)


def environment(service: str) -> dict:
    return SERVICES[service].get("environment") or {}


def test_every_service_is_there():
    assert set(SERVICES) == {"redis-acl", "redis", "postgres", "migrate", *CONTROL, *OPTIONAL, *GPU_NODE}


def test_redis_keeps_an_fsynced_aof_never_evicts_and_takes_its_users_from_the_acl_file_only():
    redis = SERVICES["redis"]
    assert redis["image"] == "redis:7"
    flags = command("redis")
    for flag in ("--aclfile /etc/redis/acl/users.acl", "--appendonly yes", "--appendfsync everysec",
                 "--maxmemory-policy noeviction"):
        assert flag in flags
    # No shared password: the default user is off (the file's first line), every process has its own.
    assert "--requirepass" not in flags and "REDIS_PASSWORD}" not in COMPOSE_TEXT
    assert any(volume.endswith(":/data") for volume in redis["volumes"])
    assert "redis-acl:/etc/redis/acl:ro" in redis["volumes"]
    assert redis["depends_on"]["redis-acl"]["condition"] == "service_completed_successfully"
    assert "redis-cli --user admin ping" in " ".join(redis["healthcheck"]["test"])
    assert environment("redis")["REDISCLI_AUTH"] == "${GPULSE_REDIS_PASSWORD_ADMIN:-}"


def test_the_acl_service_writes_the_users_file_the_generator_makes_for_every_node_in_gpulse_nodes(tmp_path):
    """The redis-acl service's own shell command, run here with a .env's variables: the file it leaves is
    the generator's, with each GPU node's two users and the default user off."""
    acl_service = SERVICES["redis-acl"]
    assert acl_service["env_file"] == [".env"] and acl_service["restart"] == "no"
    assert "redis-acl:/var/lib/gpulse-acl" in acl_service["volumes"]
    assert re.search(r"^RUN install -d -m 0755 -o 10001 -g 10001 /var/lib/gpulse-acl$", DOCKERFILE, re.M)
    shell = acl_service["command"][2].replace("$$", "$").replace("/var/lib/gpulse-acl", str(tmp_path))
    shell = shell.replace("python -m", f"{sys.executable} -m")
    names = ("ADMIN", "WEB", "INGEST", "CONTROL", "NODE_GPU_01", "NODEWORKER_GPU_01", "NODE_GPU_02",
             "NODEWORKER_GPU_02")
    env = {**os.environ, "GPULSE_NODES": "gpu-01, gpu-02",
           **{f"GPULSE_REDIS_PASSWORD_{name}": f"password-{name.lower()}" for name in names}}
    done = subprocess.run(["sh", "-c", shell], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    users = (tmp_path / "users.acl").read_text().splitlines()
    assert users[0] == "user default off"
    assert [line.split()[1] for line in users[1:]] == [
        "ingest", "web", "control", "node-gpu-01", "nodeworker-gpu-01", "node-gpu-02", "nodeworker-gpu-02", "admin"]
    assert "password-" not in "\n".join(users)  # hashes only

    # A missing node password stops the service, naming the variable, and leaves no file behind.
    (tmp_path / "users.acl").unlink()
    del env["GPULSE_REDIS_PASSWORD_NODE_GPU_02"]
    done = subprocess.run(["sh", "-c", shell], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "GPULSE_REDIS_PASSWORD_NODE_GPU_02" in done.stderr
    assert not (tmp_path / "users.acl").exists()


def test_postgres_keeps_its_data_and_reports_ready():
    postgres = SERVICES["postgres"]
    assert postgres["image"] == "postgres:16"
    assert any(volume.endswith(":/var/lib/postgresql/data") for volume in postgres["volumes"])
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])


@pytest.mark.parametrize("service", LONG_RUNNING)
def test_every_long_running_service_has_a_healthcheck(service):
    check = SERVICES[service]["healthcheck"]
    assert not check.get("disable") and check["test"][0] in ("CMD", "CMD-SHELL")


def test_healthcheck_scripts_are_valid_python_and_use_the_redis_contract():
    scripts = [check["test"][3] for check in (SERVICES[s]["healthcheck"] for s in LONG_RUNNING)
               if check["test"][:3] == ["CMD", "python", "-c"]]
    assert len(scripts) >= 4
    for script in scripts:
        compile(script, "healthcheck", "exec")
    keys = Keys("gpulse:")
    assert keys.ingest_heartbeat == "gpulse:" + "ingest:heartbeat"
    assert "'ingest:heartbeat'" in SERVICES["ingest"]["healthcheck"]["test"][3]
    assert keys.node("n1") == "gpulse:" + "node:" + "n1"
    assert "'node:' + name" in SERVICES["collector"]["healthcheck"]["test"][3]


def test_the_processes_run_the_project_entry_points():
    assert command("web").startswith("uvicorn dashboard.asgi:application")
    assert command("ingest") == "python manage.py ingest"
    assert command("control-worker").startswith("celery -A dashboard.control_worker worker -Q control")
    assert command("webhooks").startswith("celery -A dashboard.control_worker worker -Q webhooks")
    assert command("scheduler").startswith("celery -A dashboard.control_worker worker -Q scheduler")
    assert command("beat").startswith("celery -A dashboard.control_worker beat")
    # Started only where drain is wanted, from the control image with slurm-client added.
    assert SERVICES["scheduler"]["profiles"] == ["slurm-drain"]
    assert SERVICES["scheduler"]["build"]["dockerfile"] == "deploy/slurm/Dockerfile"
    assert (ROOT / "deploy/slurm/Dockerfile").read_text().count("FROM gpulse:control\n") == 1
    assert '-Q "node.$$node"' in command("node-worker")
    assert 'node="$${GPULSE_NODE_NAME:-$$HOSTNAME}"' in command("node-worker")
    assert "celery -A workers.node_worker worker" in command("node-worker")
    for path in ("dashboard/asgi.py", "dashboard/control_worker.py", "workers/node_worker.py",
                 "dashboard/live/management/commands/ingest.py", "collectors/__main__.py"):
        assert (ROOT / path).exists(), path


@pytest.mark.parametrize("service", ["control-worker", "node-worker"])
def test_workers_get_a_stop_grace_period_to_finish_their_tasks(service):
    # Docker's default is 10 s, then SIGKILL: a task cut short mid-way.
    grace = SERVICES[service]["stop_grace_period"]
    assert re.fullmatch(r"\d+s", grace) and int(grace[:-1]) >= 60


def test_the_collector_command_is_one_the_collector_cli_accepts():
    shell = SERVICES["collector"]["command"][2]
    words = shlex.split(shell.replace("$${GPULSE_NODE_NAME:-$$HOSTNAME}", "gpu-01"))
    assert words[:4] == ["exec", "python", "-m", "collectors"]
    args = build_parser().parse_args(words[4:])
    assert args.source == "nvml" and args.node_name == "gpu-01"


def test_migrations_run_once_before_the_control_processes_start():
    migrate = SERVICES["migrate"]
    assert "manage.py migrate --noinput" in command("migrate") and migrate["restart"] == "no"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    for service in (*CONTROL, *OPTIONAL):
        depends = SERVICES[service]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully"
        assert depends["redis"]["condition"] == "service_healthy"


def test_gpu_node_services_reserve_every_nvidia_gpu_under_the_gpu_node_profile():
    for service in GPU_NODE:
        spec = SERVICES[service]
        assert spec["profiles"] == ["gpu-node"]
        devices = spec["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
        assert "depends_on" not in spec  # a GPU node runs no Redis or database of its own
    for service in ("redis", "postgres", "migrate", *CONTROL):
        assert "profiles" not in SERVICES[service]
        assert "deploy" not in SERVICES[service] or service == "beat"  # beat's: one replica (below)


def test_the_cluster_runs_one_beat_whose_schedule_file_stays_out_of_the_image_s_code():
    """Two beats would send every retention pass twice; a schedule file in the working directory (/app)
    would be written where the code is."""
    assert SERVICES["beat"]["deploy"] == {"replicas": 1}
    words = SERVICES["beat"]["command"]
    assert words[words.index("--schedule") + 1].startswith("/tmp/")


# Each control-host service's Redis user (gpulse/redis_acl.py roles).
CONTROL_USERS = {"migrate": "web", "web": "web", "ingest": "ingest", "control-worker": "control",
                 "webhooks": "control", "scheduler": "control", "beat": "control"}


def test_control_processes_run_production_settings_against_postgres_and_redis_each_as_its_own_user():
    for service, user in CONTROL_USERS.items():
        env = environment(service)
        assert env["GPULSE_ENV"] == "production"
        assert env["DATABASE_URL"].startswith("postgres://${POSTGRES_USER")
        assert env["DATABASE_URL"].endswith("@postgres:5432/${POSTGRES_DB:-gpulse}")
        variable = "GPULSE_REDIS_PASSWORD_" + user.upper()
        assert env["REDIS_URL"] == f"redis://{user}:${{{variable}:-}}@redis:6379/0"
        assert env["SECRET_KEY"] == "${SECRET_KEY:-}" and env["ALLOWED_HOSTS"] == "${ALLOWED_HOSTS:-}"


def test_no_service_logs_in_to_redis_as_the_default_user_and_gpu_nodes_read_their_own_url_from_a_file():
    for name, spec in SERVICES.items():
        for key, value in (spec.get("environment") or {}).items():
            assert not re.search(r"rediss?://:", str(value)), f"{name}: {key} logs in as the default user"
    for service, secret in (("collector", "collector-redis-url"), ("node-worker", "node-worker-redis-url")):
        env = environment(service)
        assert "REDIS_URL" not in env and env["GPULSE_REDIS_URL_FILE"] == "/run/secrets/redis-url"
        assert SERVICES[service]["secrets"] == [{"source": secret, "target": "redis-url"}]
        assert COMPOSE["secrets"][secret]["file"].startswith("${GPULSE_")


@pytest.mark.parametrize("service, user", [("collector", "node-gpu-01"), ("node-worker", "nodeworker-gpu-01")])
def test_the_gpu_node_healthchecks_pass_as_the_nodes_own_user(acl, tmp_path, service, user):  # noqa: F811
    """Run with the node's least-privileged URL from its secret file, as the container runs them."""
    url_file = tmp_path / "redis-url"
    url_file.write_text(acl.urls[user] + "\n")
    env = {**os.environ, "GPULSE_REDIS_URL_FILE": str(url_file), "GPULSE_NODE_NAME": "gpu-01"}
    env.pop("REDIS_URL", None)
    script = SERVICES[service]["healthcheck"]["test"][3]

    def healthcheck() -> int:
        return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True,
                              timeout=30).returncode

    if service == "collector":
        assert healthcheck() == 1  # no sample yet
        acl.admin.set(Keys().node("gpu-01"), "{}")
    assert healthcheck() == 0


def test_no_secret_is_written_into_the_compose_file():
    for name, spec in SERVICES.items():
        for key, value in (spec.get("environment") or {}).items():
            if SECRET_NAMES.search(key):
                assert "${" in str(value), f"{name}: {key} is hard-coded"
    assert not re.search(r"(?i)(password|secret)[^$\n]*[:=][ \t]*['\"]?[A-Za-z0-9]{8,}", COMPOSE_TEXT)


def test_env_example_lists_every_variable_the_compose_file_reads():
    example = (ROOT / ".env.example").read_text()
    listed = dict(line.split("=", 1) for line in example.splitlines() if line and not line.startswith("#"))
    referenced = set(INTERPOLATED.findall(COMPOSE_TEXT))
    assert referenced and referenced <= set(listed), referenced - set(listed)
    for name in ("SECRET_KEY", "POSTGRES_PASSWORD", "GPULSE_METRICS_TOKEN", "GPULSE_REDIS_PASSWORD_ADMIN",
                 "GPULSE_REDIS_PASSWORD_WEB", "GPULSE_REDIS_PASSWORD_INGEST", "GPULSE_REDIS_PASSWORD_CONTROL"):
        assert listed[name] == "", f"{name} must be left for the operator to fill in"


def dockerfile_stages() -> dict[str, tuple[str, str]]:
    """Map each build stage's name to (its base, its instructions)."""
    parts = re.split(r"^FROM (\S+) AS (\S+)$", DOCKERFILE, flags=re.M)
    return {name: (base, body) for base, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True)}


def test_the_dockerfile_builds_a_slim_node_image_and_the_control_image_on_it():
    stages = dockerfile_stages()
    assert list(stages) == ["plotly-js", "uplot-js", "node", "control"]  # control last: a plain `docker build` makes it
    node_base, node = stages["node"]
    control_base, control = stages["control"]
    assert node_base == "python:3.11-slim" and control_base == "node"
    # The node image installs only what the collector and the node worker import, and only their code.
    assert "-r requirements-node.txt" in node and "requirements.txt" not in node
    assert re.findall(r"^COPY (\S+) ", node, re.M) == ["requirements-node.txt", "collectors", "workers", "gpulse"]
    assert "DJANGO_SETTINGS_MODULE" not in node
    assert "-r requirements.txt" in control and "DJANGO_SETTINGS_MODULE=dashboard.settings" in control
    assert "requirements-dev" not in DOCKERFILE
    for body in (node, control):
        assert re.search(r"^ARG TORCH_VARIANT=cpu$", body, re.M)
        users = re.findall(r"^USER (\S+)", body, re.M)
        assert users and users[-1].split(":")[0] not in ("root", "0")
    assert re.search(r"^EXPOSE 8000$", control, re.M)
    assert "collectstatic --noinput" in control
    # Plotly.js built from the lockfile (npm ci checks each sha512), in place before collectstatic gathers it.
    plotly_base, plotly_js = stages["plotly-js"]
    assert plotly_base.startswith("node:") and "RUN npm ci " in plotly_js and "node build.js" in plotly_js
    assert "vendor/plotly/package-lock.json" in plotly_js
    assert control.index("COPY --from=plotly-js /plotly/dist vendor/plotly/dist") < control.index("collectstatic")
    # uPlot likewise, where dashboard/settings.py serves it from.
    uplot_base, uplot_js = stages["uplot-js"]
    assert uplot_base.startswith("node:") and "RUN npm ci " in uplot_js and "node build.js" in uplot_js
    assert "vendor/uplot/package-lock.json" in uplot_js
    uplot_dist = str(UPLOT_DIST.relative_to(ROOT))
    assert control.index(f"COPY --from=uplot-js /uplot/{uplot_dist.removeprefix('vendor/uplot/')} {uplot_dist}") < \
        control.index("collectstatic")
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert {"vendor/plotly/node_modules", "vendor/plotly/dist",
            "vendor/uplot/node_modules", "vendor/uplot/dist"} <= set(ignored)
    healthcheck = re.search(r'^HEALTHCHECK .*\n\s+CMD python -c "(.*)"$', control, re.M)
    compile(healthcheck.group(1), "HEALTHCHECK", "exec")
    assert "/healthz" in healthcheck.group(1)


def test_each_service_builds_the_image_target_it_needs():
    targets = {"node", "control"}
    assert targets == set(dockerfile_stages()) - {"plotly-js", "uplot-js"}  # build stages, no service's image
    for service in ("migrate", *CONTROL):
        assert SERVICES[service]["build"]["target"] == "control" and SERVICES[service]["image"] == "gpulse:control"
    for service in GPU_NODE:
        assert SERVICES[service]["build"]["target"] == "node" and SERVICES[service]["image"] == "gpulse:node"


def test_the_build_context_leaves_out_secrets_local_state_and_developer_tools():
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    for entry in (".env", ".venv", ".git", "db.sqlite3*", "tests", "devtools"):
        assert entry in ignored
