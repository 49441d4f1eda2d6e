"""Where the ranks of a job meet: the first node, on a port chosen up front."""

import ipaddress
import random
import socket

from django.conf import settings


def free_loopback_port() -> int:
    """A port nothing listens on now; the job's rank 0 binds it moments later."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def choose_rendezvous(nodes: list[str]) -> tuple[str, int]:
    """Return (address, port) of the job's torch.distributed store on its first node.

    GPULSE_RENDEZVOUS_ADDR overrides the address (the demo's simulated nodes all
    live on 127.0.0.1); otherwise node names are host names, as on a real cluster.
    """
    addr = settings.GPULSE_RENDEZVOUS_ADDR or nodes[0]
    try:
        loopback = ipaddress.ip_address(addr).is_loopback
    except ValueError:
        loopback = addr == "localhost"
    if loopback:
        return addr, free_loopback_port()
    low, high = settings.GPULSE_RENDEZVOUS_PORTS
    return addr, random.randint(low, high)
