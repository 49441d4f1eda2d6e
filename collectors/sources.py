"""The interface every telemetry source implements, and the registry of sources."""

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
