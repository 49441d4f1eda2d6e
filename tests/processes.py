"""Whether processes a test started are gone, on a machine too busy to have run them since they were killed."""

import time

import psutil


def still_running(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``processes`` alive: not ended, and not a zombie (ended, not yet reaped)."""
    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:  # ended between the two questions
            pass
    return alive


def assert_gone(processes: list[psutil.Process], timeout: float = 20) -> None:
    """Wait up to ``timeout`` seconds for every one of ``processes`` to end: a SIGKILL sent is acted on
    only once the process next runs."""
    deadline = time.monotonic() + timeout
    while alive := still_running(processes):
        if time.monotonic() > deadline:
            raise AssertionError(f"processes left behind: {[' '.join(p.cmdline()) for p in alive]}")
        time.sleep(0.1)


def descendants(command: str) -> list[psutil.Process]:
    """This process's children and theirs whose command line contains ``command``; one that ends while
    being looked at is left out."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if command in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found
