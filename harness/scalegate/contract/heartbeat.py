"""Per-rank heartbeats: where each rank last was, so a hung job can say who stopped where.

Each rank rewrites one small file, ``<out_dir>/rank<r>.heartbeat``, at every phase change and at
the start of every step, always outside the timed region. The launching side reads them when a case runs past its timeout.

Shared by both sides like the spec: it imports nothing from the worker or the launcher.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


def path(out_dir: Path, rank: int) -> Path:
    return Path(out_dir) / f"rank{rank}.heartbeat"


def stack_path(out_dir: Path, rank: int) -> Path:
    """Where a rank's faulthandler writes its stack when signalled (the fallback to py-spy)."""
    return Path(out_dir) / f"rank{rank}.stack"


RECORD_BYTES = 256  # one fixed-size record, rewritten in place


class Writer:
    """The worker's side: ``beat(step, phase)`` is one ``pwrite`` of a fixed-size record at offset 0
    (tens of microseconds; a write this small is never seen half-done by a reader on Linux)."""

    def __init__(self, out_dir: Path, rank: int) -> None:
        target = path(out_dir, rank)
        target.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.rank = rank
        self.pid = os.getpid()
        self.thread = threading.main_thread().ident or 0  # names the main thread in a faulthandler dump

    def beat(self, step: int, phase: str) -> None:
        record = json.dumps(
            {
                "rank": self.rank,
                "pid": self.pid,
                "step": step,
                "phase": phase[:64],
                "time": time.time(),
                "thread": self.thread,
            }
        )
        try:
            os.pwrite(self.fd, record.ljust(RECORD_BYTES).encode()[:RECORD_BYTES], 0)
        except OSError:
            pass  # a full disk must not kill training; the summary then says the beat is stale


@dataclass(frozen=True, kw_only=True)
class Beat:
    rank: int
    pid: int
    step: int
    phase: str
    time: float
    thread: int = 0  # the main thread's ident: faulthandler's dumps name threads only by it

    def describe(self, now: float) -> str:
        where = f"step {self.step}" if self.step >= 0 else "before the first step"
        return f"rank {self.rank}: {where} ({self.phase}), last beat {now - self.time:.1f}s ago, pid {self.pid}"


def read(out_dir: Path, rank: int) -> Beat | None:
    try:
        data = json.loads(path(out_dir, rank).read_text())
        return Beat(
            rank=int(data["rank"]),
            pid=int(data["pid"]),
            step=int(data["step"]),
            phase=str(data["phase"]),
            time=float(data["time"]),
            thread=int(data.get("thread", 0)),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_all(out_dir: Path, world_size: int) -> dict[int, Beat | None]:
    return {rank: read(out_dir, rank) for rank in range(world_size)}


def summary(beats: dict[int, Beat | None], now: float | None = None) -> str:
    """One line per rank, led by the ranks that got least far (the likely culprits)."""
    now = time.time() if now is None else now
    seen = [b for b in beats.values() if b is not None]
    missing = [r for r, b in beats.items() if b is None]
    lines = []
    if seen:
        lowest = min(b.step for b in seen)
        behind = sorted(b.rank for b in seen if b.step == lowest)
        if len(behind) < len(seen):
            lines.append(
                f"stopped first: rank(s) {', '.join(map(str, behind))} at step {lowest}; "
                f"the others went further and wait for them"
            )
        else:
            lines.append(
                f"every rank stopped at step {lowest}: one of them never joined a collective (compare the stacks below)"
            )
    if missing:
        lines.append(
            f"no heartbeat from rank(s) {', '.join(map(str, missing))}: stuck before training "
            f"(import, rendezvous or process-group init)"
        )
    lines += [b.describe(now) for b in sorted(seen, key=lambda b: (b.step, b.rank))]
    return "\n".join(lines)


class Deferred:
    """Step beats written by a thread of their own, at most every ``interval_s``, for a loop whose steps are timed
    with the beat inside them (a team's script: the optimizer step hook runs within the step). ``step(n)`` only
    stores n; the thread writes the newest one. A ``pwrite`` costs ~2 us alone, yet in a 2 ms CPU step loop it
    cost 1.5-2.5% of the step (the file's mtime update each time the clock tick moved; docs/your-script.md): a hung
    rank's file still names its last step within ``interval_s``, long before any timeout reads it."""

    def __init__(self, beat: Callable[[int, str], None], interval_s: float = 0.05) -> None:
        self.beat, self.interval_s = beat, interval_s
        self.pending: int | None = None
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="scalegate-heartbeat", daemon=True)
        self.thread.start()

    def step(self, step: int) -> None:
        self.pending = step

    def now(self, step: int, phase: str) -> None:
        """A phase beat, written at once; a stored step beat older than it is dropped."""
        with self.lock:
            self.pending = None
            self.beat(step, phase)

    def flush(self) -> None:
        with self.lock:
            step, self.pending = self.pending, None
            if step is not None:
                self.beat(step, "step")

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=1.0)
        self.flush()

    def _run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            self.flush()
