"""A rank's side of the duet (docs/duet.md): it asks for a turn at each step boundary and gives it back.

Outside a duet (``SCALEGATE_DUET`` unset: every session but a ``gate --base`` round's) every call is a no-op. In a
duet the rank's first ``turn()`` comes before its setup, one comes before every step, and ``leave()`` ends its last
turn when it has nothing more to run; everything between a grant and the next call is the rank's turn, and nothing
of the partner job runs meanwhile. ``sync`` runs before a turn is given back (a device sync on CUDA), so none of
this step's kernels runs in the partner's turn. Worker side.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any, Callable

from scalegate.contract import duet

# A rank waits this long at most for one answer: the partner's setup and a whole step of the other job may come
# first; past it the coordinator is taken for gone (the gate killed) rather than hanging the rank.
WAIT_S = float(os.environ.get("SCALEGATE_DUET_WAIT_S", 900))


class DuetStopped(BaseException):
    """The coordinator stopped this rank: the other side failed or a turn was never given back. A BaseException, so
    a team's script's own ``except Exception`` around its step does not swallow it (raised in its step hook)."""


class Turns:
    def __init__(self, address: str, side: str, job: str, rank: int, world: int, sync: Callable[[], None]) -> None:
        self.side, self.job, self.rank, self.sync = side, job, rank, sync
        self.sock = duet.connect(address, WAIT_S)
        self.lines = duet.Lines(self.sock)
        self.holding = False  # a turn is granted and not yet given back
        self.alone = ""  # why the job runs without a partner ("" while it takes turns)
        self.turns = 0
        self.waited_s = 0.0
        duet.send(self.sock, {"op": "hello", "v": duet.VERSION, "side": side, "job": job, "rank": rank, "world": world})

    def turn(self, step: int) -> None:
        """Give back the turn held (after ``sync``), then wait for the next one; ``step``: the last step this rank
        finished (-1: none yet), which a hang's or a crash's message names."""
        if self.alone:
            return
        if self.holding:
            self.sync()
            duet.send(self.sock, {"op": "done", "step": step})
            self.holding = False
        started = time.perf_counter()
        answer = self._read()
        self.waited_s += time.perf_counter() - started
        if answer["op"] == "go":
            self.holding, self.turns = True, self.turns + 1
        elif answer["op"] == "solo":
            self.alone = answer.get("why") or "no partner"
        else:
            raise DuetStopped(
                f"the duet stopped this {self.side} job ({self.job}, rank {self.rank}): {answer.get('why')}"
            )

    def leave(self, step: int) -> None:
        """The job's last turn ended: it runs nothing more that the partner's steps could share the cores with."""
        try:
            if not self.alone:
                self.sync()
            duet.send(self.sock, {"op": "bye", "step": step})
        except OSError:
            pass
        finally:
            self.sock.close()

    @property
    def paired(self) -> bool:
        """The job takes turns with its partner (not solo)."""
        return not self.alone

    def summary(self) -> dict[str, Any]:
        return {
            "side": self.side,
            "job": self.job,
            "paired": self.paired,
            "why": self.alone,
            "turns": self.turns,
            "waited_s": round(self.waited_s, 3),
        }

    def _read(self) -> dict[str, Any]:
        try:
            answer = self.lines.read()
        except (socket.timeout, OSError) as exc:
            raise DuetStopped(f"no answer from the duet's coordinator in {WAIT_S:.0f} s ({exc}): is the gate gone?")
        if answer is None:
            raise DuetStopped("the duet's coordinator closed the connection (the gate ended or was killed)")
        return answer


class NoTurns:
    """Outside a duet: every call does nothing."""

    paired = False

    def turn(self, step: int) -> None:
        pass

    def leave(self, step: int) -> None:
        pass

    def summary(self) -> dict[str, Any]:
        return {}


ACTIVE: Turns | NoTurns = NoTurns()


def start(out_dir: Path, rank: int, world: int, sync: Callable[[], None]) -> Turns | NoTurns:
    """This rank's client (``ACTIVE``), from the environment the gate gave the session; its first turn comes next.
    The job's name is its launch directory's (the case id, ``~2`` for a second launch of it in the session): the two
    sides' sessions name a case's launches alike, so the same launch of the same case pairs."""
    global ACTIVE
    address = os.environ.get(duet.ADDRESS_ENV)
    if not address:
        ACTIVE = NoTurns()
        return ACTIVE
    side = os.environ.get(duet.SIDE_ENV, "head")
    job = Path(out_dir).resolve().parent.name
    ACTIVE = Turns(address, side, job, rank, world, sync)
    return ACTIVE
