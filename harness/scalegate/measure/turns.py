"""A rank's side of the duet (docs/duet.md): it asks for a turn at each step boundary and gives it back.

Outside a gate (the spec's ``duet_address`` is None: every session but a ``gate --base`` round's) every call is a
no-op. In a duet the rank's first ``turn()`` comes before its setup, one comes before every step, and ``leave()``
ends its last turn when it has nothing more to run; everything between a grant and the next call is the rank's turn,
and nothing of the partner job runs meanwhile. ``sync`` runs before a turn is given back (a device sync on CUDA), so
none of this step's kernels runs in the partner's turn. In the alternate pairing the first turn is the whole job
(``alone``): it starts after its partner has left, or before its partner starts. Worker side.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any, Callable

from scalegate.contract import duet
from scalegate.contract.spec import CaseSpec
from scalegate.policy import RANK_WAIT_S as WAIT_S  # past it the coordinator is taken for gone, not waited on


class DuetStopped(BaseException):
    """The coordinator stopped this rank: the other side failed or a turn was never given back. A BaseException, so
    a team's script's own ``except Exception`` around its step does not swallow it (raised in its step hook)."""


class Turns:
    def __init__(
        self, address: str, side: str, job: str, rank: int, world: int, sync: Callable[[], None], node: int = 0
    ) -> None:
        self.side, self.job, self.rank, self.sync = side, job, rank, sync
        self.sock = duet.connect(address, WAIT_S)
        self.lines = duet.Lines(self.sock)
        self.holding = False  # a turn is granted and not yet given back
        self.alone = ""  # why the job runs without a partner ("" while it takes turns)
        self.alternate = False  # the alternate pairing: the job runs whole, its partner before or after it
        self.turns = 0
        self.waited_s = 0.0
        hello = {"op": "hello", "v": duet.VERSION, "side": side, "job": job, "rank": rank, "world": world, "node": node}
        duet.send(self.sock, hello)

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
        elif answer["op"] in ("solo", "alone"):
            self.alone = answer.get("why") or "no partner"
            self.alternate = answer["op"] == "alone"
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
            "alternate": self.alternate,
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


def start(
    spec: CaseSpec, out_dir: Path, rank: int, world: int, sync: Callable[[], None], node: int = 0
) -> Turns | NoTurns:
    """This rank's client (``ACTIVE``), from the pairing its spec carries; its first turn comes next. The job's name
    is its launch directory's (the case id, ``~2`` for a second launch of it in the session): the two sides'
    sessions name a case's launches alike, so the same launch of the same case pairs."""
    global ACTIVE
    if not spec.duet_address:
        ACTIVE = NoTurns()
        return ACTIVE
    job = Path(out_dir).resolve().parent.name
    ACTIVE = Turns(spec.duet_address, spec.duet_side, job, rank, world, sync, node)
    return ACTIVE
