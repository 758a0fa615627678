"""The duet's coordinator (docs/duet.md): a thread of the gate that pairs the two sides' jobs of a case and grants
turns, one optimizer step each (duet; ``turn_steps`` steps each where the gate asks for longer turns) or one whole
job each (alternate), one job at a time on the host.

Every rank connection has a reader thread that only turns messages into events; one thread decides. A job is
granted when it is ready (every rank asked for a turn), it is its turn in its pair's ABBA order, and no job holds
the token. A job without a partner past ``pair_wait_s`` (or once the other side's session has ended) runs solo,
holding the token until it leaves; so does a job of a case the gate refused for the round (``round_started``: two
resident jobs would not fit in GPU memory, launch/duet_fit.py) runs whole (``alone``), as every job does in the
alternate pairing: its partner starts after it has left, the side that starts first alternating pair by pair. A rank
whose connection closes without ``bye`` stops the partner job, naming the side, rank and step; a turn not given back
within ``turn_s`` stops both, naming every rank's last step. A multi-node gate's other nodes follow over the same
socket (``follow``): node 0 names each round to them and waits until they ran it (gate/nodes.py).
"""

from __future__ import annotations

import os
import queue
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalegate.contract import duet
from scalegate.policy import PAIR_WAIT_S, TURN_S


@dataclass(eq=False)
class Job:
    side: str
    name: str
    world: int
    since: float
    ranks: dict[int, socket.socket] = field(default_factory=dict)
    waiting: set[int] = field(default_factory=set)  # ranks that asked for a turn and have none
    last_step: dict[int, int] = field(default_factory=dict)
    where: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> its last ``where`` in a long turn
    nodes: dict[int, int] = field(default_factory=dict)  # rank -> its node (a multi-node job's)
    left: set[int] = field(default_factory=set)
    solo: str = ""  # why it runs without a partner
    alternate: bool = False  # it ran whole, its partner before or after it (the alternate pairing)
    failed: str = ""
    turns: int = 0
    first_turn: float = 0.0  # the timeline (time.monotonic()): its first grant, its end, its turns' time held
    ended: float = 0.0
    held: float = 0.0

    @property
    def ready(self) -> bool:
        return len(self.ranks) == self.world and self.waiting == set(self.ranks) - self.left

    @property
    def gone(self) -> bool:
        return bool(self.failed) or (len(self.ranks) == self.world and self.left == set(self.ranks))

    def tell(self, message: dict[str, Any], ranks: set[int] | None = None) -> None:
        for rank in ranks if ranks is not None else set(self.ranks) - self.left:
            try:
                duet.send(self.ranks[rank], message)
            except OSError:
                pass


class Coordinator:
    """``with Coordinator() as c:`` the sessions get ``c.address`` (``--scaling-duet``); ``c.report()`` after.
    ``alternate``: every job runs whole; ``turn_steps``: the steps of a turn after a job's first (its setup, one
    turn); ``swap``: a job's ranks swap their training state out of device memory between its turns; ``tcp``:
    (interface, port) to listen on, where other nodes reach it as ``host``."""

    def __init__(
        self,
        pair_wait_s: float = PAIR_WAIT_S,
        turn_s: float = TURN_S,
        alternate: bool = False,
        tcp: tuple[str, int] | None = None,
        host: str = "",
        turn_steps: int = 1,
        swap: bool = False,
    ) -> None:
        self.pair_wait_s, self.turn_s, self.alternate = pair_wait_s, turn_s, alternate
        self.turn_steps, self.swap = turn_steps, swap
        self.t0 = time.monotonic()
        self.rounds_at: list[float] = []  # each round's start, for the timeline
        self.dir = tempfile.mkdtemp(prefix="scalegate-duet-")
        self.path = Path(self.dir) / "coordinator.sock"
        self.address = f"unix:{self.path}"  # this host's ranks: reached from inside a network namespace too
        self.tcp_address = f"tcp:{host}:{tcp[1]}" if tcp is not None else ""  # other nodes' gates and ranks
        self.followers: dict[int, socket.socket] = {}  # node -> its gate's connection (gate/nodes.py)
        self.from_nodes: queue.Queue = queue.Queue()  # (node, message) of the followers, "ran" and their end
        self.events: queue.Queue = queue.Queue()
        self.jobs: dict[tuple[str, str], Job] = {}
        self.finished: list[Job] = []  # jobs gone, whose name a later round's launch of the case takes again
        self.holder: Job | None = None
        self.held_since = 0.0
        self.ended_sides: set[str] = set()
        self.refused: dict[str, str] = {}  # {case id: why} this round's jobs of it run whole (launch/duet_fit.py)
        self.pair_order: dict[str, int] = {}  # alternate: each pair's place in the round's ABBA order, by job name
        self.idle_since = time.monotonic()  # when the token was last given back: a wait for a partner counts from it
        self.first = "head"  # the side whose job takes a pair's first turn (its setup first): alternates by round
        self.stopped = threading.Event()
        self.servers = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)]
        self.servers[0].bind(str(self.path))
        if tcp is not None:
            self.servers.append(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            self.servers[1].setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.servers[1].bind(tcp)
        for server in self.servers:
            server.listen(256)
        self.threads = [threading.Thread(target=self._decide)]
        self.threads += [threading.Thread(target=self._accept, args=(server,), daemon=True) for server in self.servers]

    def __enter__(self) -> "Coordinator":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.events.put(("wake", None, None))
        self.threads[0].join(timeout=10)
        for server in self.servers:
            server.close()
        for job in self.jobs.values():
            for sock in job.ranks.values():
                sock.close()
        for sock in self.followers.values():
            sock.close()
        self.path.unlink(missing_ok=True)
        os.rmdir(self.dir)

    def round_started(self, refused: dict[str, str] | None = None, first: str = "head") -> None:
        """A new round's two sessions start: the sides that ended in the round before are back; the jobs of the cases
        in ``refused`` ({case id: why}) run solo, one after the other; ``first``: the side whose jobs take the first
        turn of the round's ABBA order. The gate alternates it by round: the side that sets up and steps first ran
        faster at 1x1 by 0.8% (A/A, both sides one tree, 10 rounds each way: -0.85% head first, +0.81% base first;
        experiments/duet_bias.py), a bias no order inside the round removes. It first waits (``settle``) until the
        round before's jobs are gone: their ranks' last ``bye`` may still be unread when the new ranks say hello, and
        a new job would take a partner that is leaving for its own."""
        self.settle()
        self.events.put(("round", None, (dict(refused or {}), first)))

    def side_ended(self, side: str) -> None:
        """The gate saw that side's session exit: its partner jobs stop waiting for it."""
        self.events.put(("ended", side, None))

    def settle(self, timeout_s: float = 5.0) -> bool:
        """Wait until every job has left or failed: a rank's last ``bye`` is read by another thread, so the report
        taken as soon as the sessions exit could miss a job's end. False if one is still running after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(job.gone for job in list(self.jobs.values())):
                return True
            time.sleep(0.02)
        return False

    def report(self) -> dict[str, dict[str, Any]]:
        """Per side and job: paired or solo (and why), turns granted, a failure; and its timeline in seconds since the
        coordinator started: its first rank's hello, its first turn, its end, and the time its turns held the token
        (the rest of a round's wall is start-up, waits and hand-offs: benchmarks/duet_timeline.py)."""
        at = self._since
        return {
            f"{n}:{j.side}:{j.name}": {
                "side": j.side,
                "job": j.name,
                "turns": j.turns,
                "solo": j.solo,
                "alternate": j.alternate,
                "failed": j.failed,
                "joined_s": at(j.since),
                "first_turn_s": at(j.first_turn),
                "ended_s": at(j.ended),
                "held_s": round(j.held, 3),
            }
            for n, j in enumerate([*self.finished, *self.jobs.values()])
        }

    def timeline(self) -> dict[str, Any]:
        """The rounds' starts, in seconds since the coordinator started (the jobs' are in ``report``)."""
        return {"rounds_s": [self._since(t) for t in self.rounds_at]}

    def _since(self, t: float) -> float | None:
        return round(t - self.t0, 3) if t else None

    # --- threads ------------------------------------------------------------------------------------------------
    def _accept(self, server: socket.socket) -> None:
        while not self.stopped.is_set():
            try:
                sock, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(sock,), daemon=True).start()

    def _read(self, sock: socket.socket) -> None:
        lines = duet.Lines(sock)
        while True:
            try:
                message = lines.read()
            except (OSError, ValueError):
                message = None
            self.events.put(("message" if message else "closed", sock, message))
            if message is None:
                return

    def _decide(self) -> None:
        owners: dict[socket.socket, tuple[Job, int]] = {}
        while not self.stopped.is_set():
            try:
                kind, sock, message = self.events.get(timeout=1.0)
            except queue.Empty:
                kind, sock, message = "wake", None, None
            if kind == "message" and message["op"] == "follow":
                self.followers[int(message["node"])] = sock
                self.from_nodes.put((int(message["node"]), message))
            elif kind in ("message", "closed") and sock in self.followers.values():
                node = next(n for n, s in self.followers.items() if s is sock)
                self.from_nodes.put((node, message if kind == "message" else {"op": "gone"}))
            elif kind == "message" and message["op"] == "hello":
                job = self._job(message)
                job.ranks[int(message["rank"])] = sock
                job.nodes[int(message["rank"])] = int(message.get("node", 0))
                job.waiting.add(int(message["rank"]))
                owners[sock] = (job, int(message["rank"]))
            elif kind == "message" and sock in owners and message["op"] == "where":
                job, rank = owners[sock]
                job.where[rank] = message  # a turn held long: where the rank is, for _hung
            elif kind == "message" and sock in owners:
                job, rank = owners[sock]
                job.last_step[rank] = int(message.get("step", -1))
                (job.left if message["op"] == "bye" else job.waiting).add(rank)
                if job.gone and not job.ended:
                    job.ended = time.monotonic()
            elif kind == "closed" and sock in owners:
                job, rank = owners.pop(sock)
                if rank not in job.left and not job.failed:
                    step = job.last_step.get(rank, -1) + 1
                    self._failed(job, f"rank {rank} on node {job.nodes.get(rank, 0)} exited mid-duet at step {step}")
            elif kind == "ended":
                self.ended_sides.add(sock)  # type: ignore[arg-type]
            elif kind == "round":
                self.rounds_at.append(time.monotonic())
                self.ended_sides.clear()
                self.pair_order.clear()
                self.refused, self.first = message  # type: ignore[misc]
            self._schedule()

    # --- decisions ----------------------------------------------------------------------------------------------
    def _job(self, hello: dict[str, Any]) -> Job:
        key = (str(hello["side"]), str(hello["job"]))
        if key in self.jobs and self.jobs[key].gone:  # the same case's launch in a later round
            self.finished.append(self.jobs.pop(key))
        if key not in self.jobs:
            self.jobs[key] = Job(side=key[0], name=key[1], world=int(hello["world"]), since=time.monotonic())
            other = ("base" if key[0] == "head" else "head", key[1])
            if other in self.jobs and self.jobs[other].gone:  # a new job's partner that is gone is an earlier round's
                self.finished.append(self.jobs.pop(other))
        return self.jobs[key]

    def _partner(self, job: Job) -> Job | None:
        return self.jobs.get(("base" if job.side == "head" else "head", job.name))

    def _schedule(self) -> None:
        holder = self.holder
        if holder is not None:
            if holder.gone or (not holder.solo and (holder.ready or holder.left == set(holder.ranks))):
                self.holder = None  # its turn was given back (or it left, or failed)
                holder.held += time.monotonic() - self.held_since
                self.idle_since = time.monotonic()
            elif time.monotonic() - self.held_since > self.turn_s and not holder.alternate:  # a whole job: its timeout
                self._hung(holder)
            else:
                return
        candidates = [j for j in self.jobs.values() if not j.gone and j.ready]
        started = [j for j in candidates if self._pair_turns(j)]
        for job in started + [j for j in candidates if j not in started]:
            if self._grant_if_due(job):
                return

    def _grant_if_due(self, job: Job) -> bool:
        partner = self._partner(job)
        if job.solo:
            return False
        if (self.alternate or job.name in self.refused) and not job.turns:
            return self._whole_if_due(job, partner)
        if partner is None or partner.gone:
            other = "base" if job.side == "head" else "head"
            waited = time.monotonic() - job.since
            if partner is None and other not in self.ended_sides and waited < self.pair_wait_s:
                return False
            if partner is None or not self._pair_turns(job):
                return self._alone(
                    job,
                    f"no {other} job {job.name} joined in {waited:.0f} s"
                    if partner is None
                    else f"the {other} job left before the turns began",
                )
            return self._grant(job)  # the partner has left: the rest of this job's turns alone
        if not partner.ready and not partner.left:
            return False  # both must have joined before the first turn; later, it is the partner's step
        turn = self._pair_turns(job)
        order = (self.first, "base" if self.first == "head" else "head")
        due = duet.first_side(turn // 2 + turn % 2, order)  # a pair's second turn is the other side's
        if due != job.side and partner.ready and not partner.gone:
            return False
        return self._grant(job)

    def _pair_turns(self, job: Job) -> int:
        """Turns granted to the pair so far: its position in the ABBA order."""
        partner = self._partner(job)
        return job.turns + (partner.turns if partner is not None else 0)

    def _whole_if_due(self, job: Job, partner: Job | None) -> bool:
        """The alternate pairing: ``job`` runs whole now if it is its pair's turn in the round's ABBA order (its
        partner has left, or it is the side due first) and the other side is parked (``_parked``), or if its partner
        has not joined while the host was idle for ``pair_wait_s``."""
        other = "base" if job.side == "head" else "head"
        why = self.refused.get(job.name) or "alternate pairing"
        waited = time.monotonic() - max(job.since, self.idle_since)
        if partner is not None and (partner.gone or partner.turns):
            return partner.gone and self._parked(other, waited) and self._whole(job, f"{why}: after the {other} job")
        index = self.pair_order.setdefault(job.name, len(self.pair_order))
        order = (self.first, "base" if self.first == "head" else "head")
        if duet.first_side(index, order) == job.side:
            return self._parked(other, waited) and self._whole(job, f"{why}: before the {other} job")
        if partner is None and (other in self.ended_sides or waited >= self.pair_wait_s):
            return self._alone(job, f"no {other} job {job.name} joined in {waited:.0f} s")
        return False

    def _parked(self, side: str, waited: float) -> bool:
        """Whether ``side``'s session is idle, so a job of the other side may run whole: it has ended, or a job of
        it has joined and every rank waits for its first turn (before it touches the device). Between its jobs a
        session imports, spawns ranks and writes results, which slows a job beside it
        (docs/evidence/alternate.md#the-other-session-parked). Past ``pair_wait_s`` of waiting it counts as
        parked, so a session that died without a word stops nothing."""
        if side in self.ended_sides or waited >= self.pair_wait_s:
            return True
        return any(j.side == side and j.ready and not j.turns for j in self.jobs.values())

    def _whole(self, job: Job, why: str) -> bool:
        job.alternate = True
        job.turns += 1
        job.first_turn = job.first_turn or time.monotonic()
        job.solo = why
        job.tell({"op": "alone", "why": why}, set(job.waiting))
        job.waiting.clear()
        self.holder, self.held_since = job, time.monotonic()
        return True

    def _alone(self, job: Job, why: str) -> bool:
        """The job runs solo, holding the token until it leaves: nothing of another job runs meanwhile."""
        job.solo = why
        job.tell({"op": "solo", "why": why}, set(job.waiting))
        job.waiting.clear()
        self.holder, self.held_since = job, time.monotonic()
        return True

    def _grant(self, job: Job) -> bool:
        job.turns += 1
        job.first_turn = job.first_turn or time.monotonic()
        steps = 1 if job.turns == 1 else self.turn_steps  # the first turn is the job's setup
        go = {"op": "go", "turn": job.turns, "limit_s": self.turn_s, "steps": steps}
        if self.swap:
            go["swap"] = True
        job.tell(go, set(job.waiting))
        job.where.clear()
        job.waiting.clear()
        self.holder, self.held_since = job, time.monotonic()
        return True

    def _failed(self, job: Job, what: str) -> None:
        job.failed = f"the {job.side} side's {what} ({job.name})"
        job.tell({"op": "stop", "why": job.failed})  # its other ranks: their launcher ends them too
        partner = self._partner(job)
        if partner is not None and not partner.gone:
            partner.failed = f"stopped: {job.failed}"
            partner.tell({"op": "stop", "why": job.failed})
        if self.holder in (job, partner):
            self.holder = None

    def _hung(self, job: Job) -> None:
        running = sorted(set(job.ranks) - job.waiting - job.left)
        steps = ", ".join(f"rank {r} {job.last_step.get(r, -1)}" for r in sorted(job.ranks))
        where = ", ".join(f"{r} (node {job.nodes.get(r, 0)})" for r in running)
        why = (
            f"the {job.side} side's job {job.name} did not give its turn back in {self.turn_s:.0f} s: rank(s) "
            f"{where} still in the turn; last steps done: {steps}"
        ) + "".join(
            f"; rank {r} (node {job.nodes.get(r, 0)}) is stuck outside torch, in {job.where[r]['frame']}"
            for r in running
            if job.where.get(r, {}).get("frame") and not job.where[r].get("torch")
        )
        job.failed = why
        job.tell({"op": "stop", "why": why})
        partner = self._partner(job)
        if partner is not None and not partner.gone:
            partner.failed = f"stopped: {why}"
            partner.tell({"op": "stop", "why": why})
        self.holder = None
