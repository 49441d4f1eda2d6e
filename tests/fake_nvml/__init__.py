"""Build and configure the fake libnvidia-ml.so.1 (see fake_nvml.c for what it answers).

Two ways to put it under the real nvidia-ml-py binding:
- in this process: ``preload()`` loads it before pynvml does; the dynamic loader
  then hands pynvml's ``CDLL("libnvidia-ml.so.1")`` the already loaded library,
  matched by SONAME. One process holds one fake, reconfigured with
  ``FAKE_NVML_CONFIG`` (read at every nvmlInit) or ``configure()``.
- in a subprocess: ``subprocess_env()`` puts its folder first on LD_LIBRARY_PATH.
"""

import ctypes
import os
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_nvml.c")
BUILD_DIR = Path(__file__).with_name("build")
SONAME = "libnvidia-ml.so.1"

# Variant name -> extra compiler flags. "r470" lacks the entry points newer drivers added.
VARIANTS = {"current": [], "r470": ["-DFAKE_NVML_R470"]}


def build(variant: str = "current") -> Path:
    """Compile the variant unless an up-to-date build exists; return the folder holding it."""
    folder = BUILD_DIR / variant
    library = folder / SONAME
    if library.exists() and library.stat().st_mtime >= SOURCE.stat().st_mtime:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    # Write beside the target and rename, so parallel test sessions never load half a file.
    partial = folder / f".{SONAME}.{os.getpid()}"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror", f"-Wl,-soname,{SONAME}",
         *VARIANTS[variant], "-o", str(partial), str(SOURCE), "-lpthread"],
        check=True,
    )
    os.replace(partial, library)
    return folder


def config(**settings) -> str:
    """Return FAKE_NVML_CONFIG text; list values are joined with commas.

    config(gpus=8, lost=[2], unsupported=["fan", "ecc"]) -> "gpus=8;lost=2;unsupported=fan,ecc"
    config(gpus=2, gpm=["1:97:12"]) -> "gpus=2;gpm=1:97:12": GPU 1's GPM graphics engine 97 %, SM 12 %,
    the rest of its GPM metrics at their defaults; unsupported=["gpm"] is a GPU before Hopper.
    config(mig="1:1", mig_devices=["0:0:1:0:3g.40gb", "0:5:13:0:1g.10gb"]) -> GPU 0 in MIG mode with two
    instances, in slots 0 and 5 (1-4 empty): GPU instance 1 (3g.40gb) and 13 (1g.10gb), compute instance 0.
    """
    def text(value):
        return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)

    return ";".join(f"{key}={text(value)}" for key, value in settings.items())


def preload(variant: str = "current") -> ctypes.CDLL:
    return ctypes.CDLL(str(build(variant) / SONAME), mode=ctypes.RTLD_GLOBAL)


def configure(library: ctypes.CDLL, text: str) -> None:
    """Change a loaded fake's configuration now, e.g. to lose a GPU between two samples."""
    library.fakeNvmlConfigure(text.encode())


def gpm_window(library: ctypes.CDLL, gpu: int) -> float:
    """Seconds between the two samples of GPU ``gpu``'s last nvmlGpmMetricsGet."""
    library.fakeNvmlGpmWindow.restype = ctypes.c_double
    return library.fakeNvmlGpmWindow(gpu)


def subprocess_env(text: str, variant: str = "current") -> dict:
    env = dict(os.environ, FAKE_NVML_CONFIG=text)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(build(variant)), env.get("LD_LIBRARY_PATH")]))
    return env
