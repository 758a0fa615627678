"""A rank's side of the duet (docs/duet.md): it asks for a turn at each step boundary and gives it back.

Outside a gate (the spec's ``duet_address`` is None: every session but a ``gate --base`` round's) every call is a
no-op. In a duet the rank's first ``turn()`` comes before its setup, one comes before every step, and ``leave()``
ends its last turn when it has nothing more to run; everything between a grant and the next call is the rank's turn
(the next ``steps``-th call where the coordinator's ``go`` names longer turns: ``gate --turn-steps``, at most half
the job's steps, so that every job takes two turns or more and neither side's job ends while the other's runs all
its steps), and nothing of the partner job runs meanwhile. ``sync`` runs before a turn is given back (a device sync
on CUDA), so none of this step's kernels runs in the partner's turn. Where the ``go`` says ``swap`` (the swap
pairing, ``gate --pairing swap``), the rank's training state leaves device memory when it gives its turn back and
comes home when it is granted the next, both outside every step's time (measure/swap.py). In the alternate pairing
the first turn is the whole job (``alone``): it starts after its partner has left, or before its partner starts. A
turn held past half the coordinator's turn limit (the ``limit_s`` of its ``go``) makes the client say where the
rank's own thread is (``where``: its innermost Python frame, and whether that is inside torch), so that a hang's
message can name the rank that is stuck outside a collective rather than every rank still in the turn. A ``stop``
that comes while the rank holds its turn (the coordinator took the turn for hung, or the partner failed) finds the
rank stuck in its step, where no turn() call will read it: the watcher reads it and ends the rank's process at once
(``exit_stopped``), so a hung job's ranks stop holding the host when the coordinator gives up on them, not at the
launch's time limit. Worker side.
"""

from __future__ import annotations

import os
import select
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from scalegate.contract import duet
from scalegate.contract.spec import CaseSpec
from scalegate.measure.swap import Swap
from scalegate.policy import RANK_WAIT_S as WAIT_S  # past it the coordinator is taken for gone, not waited on


class DuetStopped(BaseException):
    """The coordinator stopped this rank: the other side failed or a turn was never given back. A BaseException, so
    a team's script's own ``except Exception`` around its step does not swallow it (raised in its step hook)."""


STOPPED_EXIT = 75  # a rank ended by a stop in the middle of its turn (EX_TEMPFAIL: the gate says why)
STOP_POLL_S = 1.0  # how often a held turn's watcher looks for a stop


def exit_stopped(why: str) -> None:
    """End this rank's process now: it is stuck in its turn, and the coordinator has stopped its job. The why goes to
    the rank's stderr and to torchrun's error file, which the launcher's failure message quotes."""
    print(f"scalegate: {why}; the rank exits", file=sys.stderr, flush=True)
    sys.stdout.flush()
    try:
        from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

        try:
            raise DuetStopped(why)
        except DuetStopped as exc:
            ErrorHandler().record_exception(exc)
    except Exception:  # noqa: BLE001 - the rank exits whatever the error file does
        pass
    os._exit(STOPPED_EXIT)


class Turns:
    def __init__(
        self,
        address: str,
        side: str,
        job: str,
        rank: int,
        world: int,
        sync: Callable[[], None],
        node: int = 0,
        most_steps: int = 0,
        stopped: Callable[[str], None] = exit_stopped,
    ) -> None:
        self.side, self.job, self.rank, self.sync = side, job, rank, sync
        self.sock = duet.connect(address, WAIT_S)
        self.lines = duet.Lines(self.sock)
        self.holding = False  # a turn is granted and not yet given back
        self.alone = ""  # why the job runs without a partner ("" while it takes turns)
        self.alternate = False  # the alternate pairing: the job runs whole, its partner before or after it
        self.turns = 0
        self.steps_left = 0  # turn() calls the held turn still covers (a turn of several steps)
        self.turn_steps = 1  # the longest turn taken, in steps
        self.most_steps = most_steps  # a turn's most steps: half the job's (0: as granted)
        self.waited_s = 0.0
        self.swap: Swap | None = None  # the swap pairing: the job's state out of device memory between its turns
        self.owner = threading.get_ident()  # the rank's thread: its frame is what a ``where`` reports
        self.sending = threading.Lock()  # the watcher's ``where`` and the rank's own lines never interleave
        # held while ``holding`` changes and while the watcher reads a message of a held turn: the coordinator sends
        # nothing but a stop before the turn is given back, so the watcher never takes the rank's next go
        self.reading = threading.Lock()
        self.pending: dict[str, Any] | None = None  # a message the watcher read in a held turn: turn() takes it
        self.closed = False  # the watcher read the coordinator's end of the connection: turn() finds it too
        self.stopped = stopped  # what a stop in the middle of a held turn does (the worker's: exit_stopped)
        self.granted_at, self.limit_s, self.said_at = 0.0, 0.0, 0.0
        self.ended = threading.Event()
        self.watcher: threading.Thread | None = None
        hello = {"op": "hello", "v": duet.VERSION, "side": side, "job": job, "rank": rank, "world": world, "node": node}
        duet.send(self.sock, hello)

    def _send(self, message: dict[str, Any]) -> None:
        with self.sending:
            duet.send(self.sock, message)

    def turn(self, step: int) -> None:
        """Give back the turn held (after ``sync``), then wait for the next one; ``step``: the last step this rank
        finished (-1: none yet), which a hang's or a crash's message names."""
        if self.alone:
            return
        if self.holding and self.steps_left > 1:
            self.steps_left -= 1  # the turn covers this step too
            return
        if self.holding:
            self.sync()
            if self.swap is not None:
                self.swap.out()
            with self.reading:
                self.holding = False
            self._send({"op": "done", "step": step})
        started = time.perf_counter()
        answer = self._read()
        self.waited_s += time.perf_counter() - started
        if answer["op"] == "go":
            self.granted_at, self.said_at = time.monotonic(), 0.0
            self.holding, self.turns = True, self.turns + 1
            self.steps_left = max(1, int(answer.get("steps") or 1))
            if self.most_steps:
                self.steps_left = min(self.steps_left, self.most_steps)
            self.turn_steps = max(self.turn_steps, self.steps_left)
            if answer.get("swap") and self.swap is None:
                self.swap = Swap(self.owner)  # at the setup turn's grant: it sees the optimizer's every step
            if self.swap is not None:
                self.swap.back()
            self._watch(float(answer.get("limit_s") or 0.0))
        elif answer["op"] in ("solo", "alone"):
            self.alone = answer.get("why") or "no partner"
            self.alternate = answer["op"] == "alone"
        else:
            self.ended.set()
            raise DuetStopped(
                f"the duet stopped this {self.side} job ({self.job}, rank {self.rank}): {answer.get('why')}"
            )

    def leave(self, step: int) -> None:
        """The job's last turn ended: it runs nothing more that the partner's steps could share the cores with."""
        try:
            if not self.alone:
                self.sync()
            if self.swap is not None:
                self.swap.out()  # its device memory free before the partner's next turn, not at the process's exit
            with self.reading:
                self.holding = False
            self._send({"op": "bye", "step": step})
        except OSError:
            pass
        finally:
            self.ended.set()
            self.sock.close()

    def _watch(self, limit_s: float) -> None:
        """Start the watcher once the coordinator names a turn limit (an older coordinator names none)."""
        self.limit_s = limit_s
        if limit_s > 0 and self.watcher is None:
            self.watcher = threading.Thread(target=self._watching, name="scalegate-duet-where", daemon=True)
            self.watcher.start()

    def _watching(self) -> None:
        """While a turn is held past half its limit, say where the rank is, again every quarter of the limit; a stop
        that comes while the turn is held ends the rank (``stopped``)."""
        while not self.ended.wait(max(0.05, min(self.limit_s / 8, STOP_POLL_S))):
            why = self._stop_in_turn()
            if why:
                self.stopped(why)
                return
            now = time.monotonic()
            held = self.holding and now - self.granted_at > self.limit_s / 2
            if held and (not self.said_at or now - self.said_at > self.limit_s / 4):
                self.said_at = now
                try:
                    self._send({"op": "where", **where(self.owner)})
                except OSError:
                    return

    def _stop_in_turn(self) -> str:
        """The coordinator's stop, where one came while this rank holds its turn ("" if none)."""
        with self.reading:
            if not self.holding or self.pending is not None or self.closed or self.ended.is_set():
                return ""
            try:
                if not self.lines.buffer and not select.select([self.sock], [], [], 0)[0]:
                    return ""
                message = self.lines.read()
            except (OSError, ValueError):
                return ""
            self.closed = message is None  # the gate ended: turn()'s own read finds the end again
            self.pending = message  # turn() reads it in its place (a stop too, where ``stopped`` returns)
            if message is None or message.get("op") != "stop":
                return ""
            return f"the duet stopped this {self.side} job ({self.job}, rank {self.rank}) in its turn: {message.get('why')}"

    def follow(self, optimizer: Any) -> None:
        """The swap pairing: swap what ``optimizer`` reaches from this job's next turn on (its own steps name it
        too; a workload names it before its first step, so the setup's turn ends swapped out)."""
        if self.swap is not None:
            self.swap.follow(optimizer)

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
            "turn_steps": self.turn_steps,
            "waited_s": round(self.waited_s, 3),
            **({"swap": self.swap.summary()} if self.swap is not None else {}),
        }

    def _read(self) -> dict[str, Any]:
        if self.pending is not None:
            answer, self.pending = self.pending, None
            return answer
        try:
            answer = self.lines.read()
        except (socket.timeout, OSError) as exc:
            self.ended.set()
            raise DuetStopped(f"no answer from the duet's coordinator in {WAIT_S:.0f} s ({exc}): is the gate gone?")
        if answer is None:
            self.ended.set()
            raise DuetStopped("the duet's coordinator closed the connection (the gate ended or was killed)")
        return answer


def where(thread: int) -> dict[str, Any]:
    """``thread``'s innermost Python frame, and whether its module is torch's (a rank waiting in a collective, or
    in autograd's backward, is inside torch; a rank stuck in its own code or a library's is not)."""
    frame = sys._current_frames().get(thread)
    if frame is None:
        return {"frame": "", "torch": False}
    module = str(frame.f_globals.get("__name__", ""))
    text = f"{frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_lineno})"
    return {"frame": text, "torch": module == "torch" or module.startswith("torch.")}


class NoTurns:
    """Outside a duet: every call does nothing."""

    paired = False

    def turn(self, step: int) -> None:
        pass

    def leave(self, step: int) -> None:
        pass

    def follow(self, optimizer: Any) -> None:
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
    if not spec.duet.address:
        ACTIVE = NoTurns()
        return ACTIVE
    job = Path(out_dir).resolve().parent.name
    half = max(
        1, (spec.run.warmup + spec.run.steps) // 2
    )  # a turn never spans a whole job (docs/duet.md, longer turns)
    ACTIVE = Turns(spec.duet.address, spec.duet.side, job, rank, world, sync, node, most_steps=half)
    return ACTIVE
