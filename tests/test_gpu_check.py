"""devtools.gpu_check runs on GPU nodes; elsewhere it says so instead of failing half-way."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_without_nvidia_smi_it_says_where_to_run_and_exits_2(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # an empty folder: no nvidia-smi on it
    done = subprocess.run([sys.executable, "-m", "devtools.gpu_check"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert "nvidia-smi is not on the PATH: run this on a node with the NVIDIA driver" in done.stderr
