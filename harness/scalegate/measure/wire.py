"""Bytes on the wire during the measured steps, read by the worker itself (worker side).

The launcher runs a single-node job inside a network namespace of its own and sets
``SCALEGATE_WIRE_IFACE`` (``lo``); every byte on that interface is this job's. The worker reads the
interface's tx counter at the exact edges of the measured window, so set-up, the gradient check
and warm-up are left out. Loopback counts each byte once when a rank sends it, so the count is the
node's total sent bytes; per rank it is that total over the local ranks.

Two corrections keep the number exact: a barrier aligns the ranks at both edges (its own few
bytes are measured once and subtracted), and an idle interval before the window gives the
background rate (TCPStore and agent heartbeats), subtracted over the window's duration.
Without a private namespace the launcher sets ``SCALEGATE_WIRE_UNAVAILABLE`` to the reason.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

IDLE_S = 0.3
ENV_IFACE = "SCALEGATE_WIRE_IFACE"
ENV_UNAVAILABLE = "SCALEGATE_WIRE_UNAVAILABLE"


def tx_bytes(iface: str) -> int:
    """The interface's tx counter, from ``/proc/net/dev``: the reading process's own network namespace, where
    ``/sys/class/net`` shows the namespace /sys was mounted in (a node entered with nsenter keeps the host's)."""
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, counters = line.partition(":")
        if name.strip() == iface:
            return int(counters.split()[8])  # receive: 8 fields (bytes first), then transmit: bytes
    raise OSError(f"no interface {iface!r} in this process's network namespace (/proc/net/dev)")


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


class WireCounter:
    """``start()`` right before the first measured step, ``stop()`` right after the last."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.iface = env.get(ENV_IFACE) or None
        self.unavailable = env.get(ENV_UNAVAILABLE) or (
            "" if self.iface else "the launcher gave this job no private network namespace"
        )
        self._marks: dict[str, float] = {}

    def _mark(self, name: str) -> None:
        self._marks[name + "_t"] = time.perf_counter()
        self._marks[name] = tx_bytes(self.iface)  # type: ignore[arg-type]

    def start(self) -> None:
        if not self.iface:
            return
        _barrier()
        self._mark("idle0")
        time.sleep(IDLE_S)
        self._mark("idle1")
        _barrier()
        self._mark("start")

    def stop(self) -> None:
        if not self.iface:
            return
        _barrier()
        self._mark("stop")

    def result(self, steps: int) -> dict[str, Any]:
        if not self.iface or "stop" not in self._marks:
            return {"source": "unavailable", "unavailable": self.unavailable or "not measured"}
        m = self._marks
        idle_rate = (m["idle1"] - m["idle0"]) / max(m["idle1_t"] - m["idle0_t"], 1e-9)
        barrier_bytes = m["start"] - m["idle1"]  # one barrier (+ a moment of idle traffic)
        window_s = m["stop_t"] - m["start_t"]
        raw = m["stop"] - m["start"]
        sent = max(0.0, raw - barrier_bytes - idle_rate * window_s)
        return {
            "source": f"netns:{self.iface}",
            "tx_bytes": int(raw),
            "tx_bytes_corrected": int(sent),
            "barrier_bytes": int(barrier_bytes),
            "idle_bytes_per_s": round(idle_rate, 1),
            "window_s": round(window_s, 4),
            "steps": steps,
            "bytes_per_step": int(sent / max(steps, 1)),
        }
