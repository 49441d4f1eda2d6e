"""Processes that end with the one that started them, however it ends."""

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Have the kernel send ``sig`` to this process when its parent ends, a SIGKILL included: a demo
    killed hard must not leave its web server, workers and Redis behind, serving its port. Linux only
    (elsewhere nothing happens). Usable as a Popen ``preexec_fn``."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
