"""The interface every telemetry source implements, and the registry of sources."""

import secrets
from typing import Protocol


class SourceUnavailable(RuntimeError):
    """The source cannot read anything (no driver, no library, no endpoint).

    The message is one line a person understands, e.g. "NVML: driver not loaded".
    """


class Source(Protocol):
    """One backend (nvml, simulated, dcgm) behind the same three methods."""

    name: str

    def sample(self) -> list[dict]:
        """Return one version-1 sample per node this source covers.

        Raise SourceUnavailable when nothing can be read at all; a single GPU
        that fails is reported inside the sample (null readings, ``lost``).
        """

    def close(self) -> None:
        """Release the library or connections; safe to call twice."""


class Identity:
    """Stamp each sample with this collector run's ``boot`` id and the node's next ``seq``.

    Applied once to what any source returns, so every source carries them:
    ingest drops an exact duplicate (a write retried after its reply was
    lost) and sees a new ``boot`` as a collector restart.
    """

    def __init__(self):
        self.boot = secrets.token_hex(8)
        self.seq: dict[str, int] = {}  # node -> its next seq in this run

    def stamp(self, samples: list[dict]) -> list[dict]:
        seq = self.seq
        for sample in samples:
            node = sample["node"]
            sample["seq"] = seq.get(node, 0)
            seq[node] = sample["seq"] + 1
            sample["boot"] = self.boot
        return samples
