"""`make demo`: the whole system on this machine with a simulated cluster."""

import os
import signal
import sys
import threading
from pathlib import Path

from devtools.lifetime import die_with_parent
from devtools.stack import ROOT, Stack, sim_node_names


def main() -> int:
    port = int(os.environ.get("PORT", "8000"))
    # Each demo keeps its database and Redis files under its own port, so two
    # demos on different ports never share state.
    state_dir = ROOT / ".demo" / str(port)
    sim_nodes = int(os.environ.get("GPULSE_SIM_NODES", "4"))
    stack = Stack(
        port=port,
        state_dir=state_dir,
        redis_url=os.environ.get("REDIS_URL") or None,
        database_url=os.environ.get("DATABASE_URL") or None,
        sim_nodes=sim_nodes,
        sim_gpus=int(os.environ.get("GPULSE_SIM_GPUS", "8")),
        # The last node's H100s run MIG instances (collectors/simulated.py); GPULSE_SIM_MIG_NODE= (empty): none.
        sim_mig_node=os.environ.get("GPULSE_SIM_MIG_NODE", sim_node_names(sim_nodes)[-1] if sim_nodes > 1 else "")
        or None,
    )
    stopping = threading.Event()
    # SIGTERM when `make` dies: make does not pass its own SIGTERM on to the recipe.
    die_with_parent()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stopping.set())
    try:
        print(f"gpulse: starting (logs in {Path(state_dir).relative_to(ROOT)}/) ...", flush=True)
        stack.start()
        print(stack.admin_line)
        print(f"gpulse is running at {stack.url}  (log in as admin; Ctrl-C stops everything)", flush=True)
        while not stopping.wait(1.0):
            for name, process in stack.processes:
                if process.poll() is not None:
                    print(f"gpulse: {name} exited with code {process.returncode}; see {state_dir}/{name}.log",
                          file=sys.stderr)
                    return 1
        return 0
    except RuntimeError as exc:
        print(f"gpulse: {exc}", file=sys.stderr)
        return 1
    finally:
        print("gpulse: stopping ...", flush=True)
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
