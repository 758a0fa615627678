"""Whether other work held this rank's cores through the measured window (rank side, Linux).

Two readings at the window's edges: the kernel's run-queue wait of the rank's stepping thread
(``/proc/self/task/<tid>/schedstat``, its second field: nanoseconds the thread was ready to run and waited for a
core), and the host's steal time (``/proc/stat``: a hypervisor ran another guest on this VM's cores). A rank that
runs alone on its cores waits a few percent of its window (its own helper threads); another busy process on the
same cores makes it wait far longer. The judge calls a timing verdict taken under such a wait ``noisy``
(judge/timing.py ``contended``): another program's load is not the change's. The partner job of a duet does not
count: while it takes its turn this rank is blocked on the turn, not waiting for a core.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

_TICK_S = 0.01  # /proc/stat counts in USER_HZ ticks, 100 a second on Linux


def _wait_ns(tid: int) -> int | None:
    try:
        return int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _steal_s() -> float | None:
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return int(fields[8]) * _TICK_S  # cpu user nice system idle iowait irq softirq steal
    except (OSError, IndexError, ValueError):
        return None


class CpuWait:
    """``open()`` and ``close()`` on the thread that runs the steps; ``result()`` is JSON-ready."""

    def __init__(self) -> None:
        self._start: tuple[int, float, int | None, float | None] | None = None
        self._end: tuple[int | None, float, float | None] | None = None

    def open(self) -> None:
        tid = threading.get_native_id()
        self._start = (tid, time.perf_counter(), _wait_ns(tid), _steal_s())

    def close(self) -> None:
        if self._start is None:
            return
        self._end = (_wait_ns(self._start[0]), time.perf_counter(), _steal_s())

    def result(self) -> dict[str, Any]:
        if self._start is None or self._end is None:
            return {}
        _, t0, wait0, steal0 = self._start
        wait1, t1, steal1 = self._end
        if wait0 is None or wait1 is None:
            return {"unavailable": "no /proc/self/task/<tid>/schedstat (not Linux, or schedstats off)"}
        out: dict[str, Any] = {"window_s": round(t1 - t0, 4), "wait_s": round((wait1 - wait0) / 1e9, 4)}
        if steal0 is not None and steal1 is not None and t1 > t0:
            out["steal_share"] = round((steal1 - steal0) / ((t1 - t0) * (os.cpu_count() or 1)), 4)  # of all cores
        return out
