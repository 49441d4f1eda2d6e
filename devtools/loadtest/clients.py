"""Websocket clients on /ws/cluster/, logged in as a browser is, timing every frame they receive.

All clients live in one asyncio process. The first one reads every frame in
full and keeps, per delta, the time ingest stamped on it ("sent") and the
sample "ts" of each node it carries; the others only note which delta (its
seq) arrived when, so a hundred of them cost little more than the server's
work. Latencies are computed afterwards, for the samples taken within the
measured window: the receive time of a delta at each client minus the "ts"
of each node in it.
"""

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import orjson
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.typing import Origin

# Sample ts -> which of them to count (a mask), e.g. those taken while a retention pass ran.
Selection = Callable[[np.ndarray], np.ndarray]

# frames.py writes "type" then "seq" first; anything else is parsed in full.
FRAME_HEAD = re.compile(r'^\{"type":"(\w+)","seq":(\d+)')


@dataclass
class Delta:
    """What the first client learnt from one delta frame."""

    sent: float
    nodes: list[str]
    ts: np.ndarray  # sample ts of each node in ``nodes``
    size: int  # bytes of JSON text


@dataclass
class ClientLog:
    arrivals: list[tuple[int, float]] = field(default_factory=list)  # (seq, time received) of each delta
    closed: str | None = None  # why the server closed the connection, if it did


class ClientFleet:
    def __init__(self, base_url: str, session: str, count: int):
        self.ws_url = base_url.replace("http://", "ws://", 1) + "/ws/cluster/"
        self.origin = Origin(base_url)
        self.session = session
        self.count = count
        self.deltas: dict[int, Delta] = {}
        self.logs = [ClientLog() for _ in range(count)]
        self.connected = 0
        self.nodes_in_last_delta = 0
        self.newest_ts = 0.0
        self.recording = False
        self._tasks: list[asyncio.Task] = []
        self._ready: asyncio.Future | None = None

    async def start(self, timeout: float = 60.0) -> None:
        """Connect every client; raise RuntimeError when one is refused or the timeout passes."""
        self._ready = asyncio.get_running_loop().create_future()
        self._tasks = [asyncio.create_task(self._follow(i)) for i in range(self.count)]
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except TimeoutError:
            raise RuntimeError(
                f"only {self.connected} of {self.count} websocket clients connected in {timeout:.0f} s"
            ) from None

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _follow(self, index: int) -> None:
        assert self._ready is not None  # start() makes it before the clients
        log = self.logs[index]
        try:
            async with connect(
                self.ws_url, origin=self.origin, additional_headers={"Cookie": f"sessionid={self.session}"},
                max_size=None, open_timeout=30,
            ) as ws:
                first = True
                async for message in ws:
                    received = time.time()
                    assert isinstance(message, str)  # gpulse sends text frames only
                    if first:
                        first = False
                        self.connected += 1
                        if self.connected == self.count and not self._ready.done():
                            self._ready.set_result(None)
                    if index == 0:
                        self._read_in_full(message, received)
                        continue
                    head = FRAME_HEAD.match(message)
                    kind, seq = (head[1], int(head[2])) if head else self._kind_and_seq(message)
                    if kind == "delta" and self.recording:
                        log.arrivals.append((seq, received))
            log.closed = "the server ended the connection"
        except ConnectionClosed as exc:
            log.closed = f"closed by the server: code {exc.rcvd.code if exc.rcvd else 'none'}"
        except (InvalidHandshake, OSError, TimeoutError) as exc:
            log.closed = f"connection refused: {exc}"
        if log.closed and self._ready is not None and not self._ready.done():
            self._ready.set_exception(RuntimeError(f"websocket client {index}: {log.closed}"))

    @staticmethod
    def _kind_and_seq(message: str) -> tuple[str, int]:
        frame = orjson.loads(message)
        return frame.get("type"), frame.get("seq")

    def _read_in_full(self, message: str, received: float) -> None:
        frame = orjson.loads(message)
        if frame.get("type") != "delta":
            return
        nodes = frame["nodes"]
        self.nodes_in_last_delta = len(nodes)
        ts = np.fromiter((entry["ts"] for entry in nodes.values()), dtype=float, count=len(nodes))
        if len(ts):
            self.newest_ts = max(self.newest_ts, ts.max())
        if not self.recording:
            return
        self.logs[0].arrivals.append((frame["seq"], received))
        self.deltas[frame["seq"]] = Delta(frame["sent"], list(nodes), ts, len(message))

    async def wait_for_full_frames(self, nodes: int, timeout: float) -> None:
        """Wait until a delta carries (nearly) every node: the collectors, ingest and web are all warm."""
        deadline = time.monotonic() + timeout
        while self.nodes_in_last_delta < 0.98 * nodes:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"after {timeout:.0f} s the newest frame carried {self.nodes_in_last_delta} of {nodes} nodes"
                )
            await asyncio.sleep(0.2)

    async def wait_for_samples_from(self, ts: float, timeout: float) -> bool:
        """Wait until a delta carried a sample taken at ``ts`` or later; return False on timeout."""
        deadline = time.monotonic() + timeout
        while self.newest_ts < ts:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def latencies(self, window: tuple[float, float], where: Selection | None = None) -> np.ndarray:
        """Seconds from each sample's ts (within ``window``, and where ``where`` holds) to its delta's arrival,
        over every client."""
        in_window = {seq: _within(delta.ts, window, where) for seq, delta in self.deltas.items()}
        parts = [received - in_window[seq] for log in self.logs for seq, received in log.arrivals if seq in in_window]
        return np.concatenate(parts) if parts else np.empty(0)

    def ingest_lags(self, window: tuple[float, float], where: Selection | None = None) -> list[np.ndarray]:
        """Per delta, in order: seconds from each sample's ts (within ``window``, and where ``where`` holds) to
        the frame's "sent" stamp."""
        lags = []
        for _seq, delta in sorted(self.deltas.items()):
            ts = _within(delta.ts, window, where)
            if len(ts):
                lags.append(delta.sent - ts)
        return lags

    def samples_received(self, window: tuple[float, float]) -> int:
        """Distinct (node, ts) samples within ``window`` that reached the first client."""
        seen: set[tuple[str, float]] = set()
        for delta in self.deltas.values():
            pairs = zip(delta.nodes, delta.ts.tolist(), strict=True)
            seen.update((name, ts) for name, ts in pairs if window[0] <= ts < window[1])
        return len(seen)

    def deltas_per_client(self, window: tuple[float, float]) -> list[int]:
        """How many deltas with samples from ``window`` each client received."""
        framed = {seq for seq, delta in self.deltas.items() if len(_within(delta.ts, window))}
        return [sum(seq in framed for seq, _ in log.arrivals) for log in self.logs]

    def frame_sizes(self) -> list[int]:
        return [delta.size for delta in self.deltas.values()]

    def disconnected(self) -> list[str]:
        return [f"client {i}: {log.closed}" for i, log in enumerate(self.logs) if log.closed]


def _within(ts: np.ndarray, window: tuple[float, float], where: Selection | None = None) -> np.ndarray:
    kept = (ts >= window[0]) & (ts < window[1])
    if where is not None:
        kept &= where(ts)
    return ts[kept]
