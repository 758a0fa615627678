"""The duet's coordinator (docs/duet.md): a thread of the gate that pairs the two sides' jobs of a case and grants
turns, one optimizer step each (duet; ``turn_steps`` steps each where the gate asks for longer turns) or one whole
job each (alternate), one job at a time on the host.

Every connection has a reader thread that only turns what it reads into an event; one thread decides, in four parts,
each a module of its own:

- the jobs (launch/duet_jobs.py): each side's job of a case, its ranks' connections and what they last said;
- the turn arbiter (launch/duet_arbiter.py): the one token, and which ready job it goes to in the pairs' ABBA order;
- the grants (launch/duet_grants.py): a turn (with the swap pairing's swap), a whole job (the alternate pairing, and
  the cases refused for a round: ``round_started``, launch/duet_fit.py), or the rest of a job without a partner;
- the faults (launch/duet_faults.py): a rank that exits mid-duet, a turn not given back within ``turn_s``, named.

A multi-node gate's other nodes follow over the same socket (``follow``): the node registry (launch/duet_nodes.py)
keeps them for node 0's gate, which names each round to them and waits until they ran it (gate/nodes.py).
"""

from __future__ import annotations

import os
import queue
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from scalegate.contract import duet
from scalegate.launch.duet_arbiter import Arbiter, Rules
from scalegate.launch.duet_jobs import Hello, Jobs
from scalegate.launch.duet_nodes import NodeRegistry
from scalegate.policy import PAIR_WAIT_S, TURN_S


@dataclass(frozen=True)
class Said:
    """A message read off a connection."""

    sock: socket.socket
    message: dict[str, Any]


@dataclass(frozen=True)
class Closed:
    """A connection the other end closed."""

    sock: socket.socket


@dataclass(frozen=True)
class RoundStart:
    refused: dict[str, str]
    first: str


@dataclass(frozen=True)
class SideEnded:
    side: str


@dataclass(frozen=True)
class Wake:
    """Nothing happened: the deciding thread looks at the clock (a hang, a partner that never came)."""


Event = Union[Said, Closed, RoundStart, SideEnded, Wake]


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
        self.rules = Rules(
            pair_wait_s=pair_wait_s, turn_s=turn_s, turn_steps=turn_steps, swap=swap, alternate=alternate
        )
        self.turn_steps, self.swap = turn_steps, swap  # what its turns grant, as its rules say
        self.t0 = time.monotonic()
        self.rounds_at: list[float] = []  # each round's start, for the timeline
        self.jobs = Jobs()
        self.arbiter = Arbiter(self.rules, self.jobs)
        self.nodes = NodeRegistry()  # the other nodes' gates (gate/nodes.py)
        self.events: queue.Queue[Event] = queue.Queue()
        self.dir = tempfile.mkdtemp(prefix="scalegate-duet-")
        self.path = Path(self.dir) / "coordinator.sock"
        self.address = f"unix:{self.path}"  # this host's ranks: reached from inside a network namespace too
        self.tcp_address = f"tcp:{host}:{tcp[1]}" if tcp is not None else ""  # other nodes' gates and ranks
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
        self.events.put(Wake())
        self.threads[0].join(timeout=10)
        for server in self.servers:
            server.close()
        self.jobs.close()
        self.nodes.close()
        self.path.unlink(missing_ok=True)
        os.rmdir(self.dir)

    def round_started(self, refused: dict[str, str] | None = None, first: str = "head") -> None:
        """A new round's two sessions start: the sides that ended in the round before are back; the jobs of the cases
        in ``refused`` ({case id: why}) run solo, one after the other; ``first``: the side whose jobs take the first
        turn of the round's ABBA order. The gate alternates it by round: the side that sets up and steps first ran
        faster at 1x1 (docs/evidence/duet.md#neither-side-always-goes-first), a bias no order inside the round
        removes. It first waits (``settle``) until the round before's jobs are gone: their ranks' last ``bye`` may
        still be unread when the new ranks say hello, and a new job would take a partner that is leaving for its own."""
        self.settle()
        self.events.put(RoundStart(refused=dict(refused or {}), first=first))

    def side_ended(self, side: str) -> None:
        """The gate saw that side's session exit: its partner jobs stop waiting for it."""
        self.events.put(SideEnded(side=side))

    def settle(self, timeout_s: float = 5.0) -> bool:
        """Wait until every job has left or failed: a rank's last ``bye`` is read by another thread, so the report
        taken as soon as the sessions exit could miss a job's end. False if one is still running after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.jobs.settled():
                return True
            time.sleep(0.02)
        return False

    def report(self) -> dict[str, dict[str, Any]]:
        """Per side and job: paired or solo (and why), turns granted, a failure; and its timeline in seconds since the
        coordinator started: its first rank's hello, its first turn, its end, and the time its turns held the token
        (the rest of a round's wall is start-up, waits and hand-offs: benchmarks/duet_timeline.py)."""
        return self.jobs.report(self._since)

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
            self.events.put(Said(sock, message) if message else Closed(sock))
            if message is None:
                return

    def _decide(self) -> None:
        while not self.stopped.is_set():
            try:
                event = self.events.get(timeout=1.0)
            except queue.Empty:
                event = Wake()
            self._take(event)
            self.arbiter.schedule()

    def _take(self, event: Event) -> None:
        """One event to the part it is for: a node's gate, a rank's job, the arbiter."""
        if isinstance(event, Said) and event.message["op"] == "follow":
            self.nodes.follow(event.sock, event.message)
        elif isinstance(event, (Said, Closed)) and self.nodes.owns(event.sock):
            self.nodes.heard(event.sock, event.message if isinstance(event, Said) else None)
        elif isinstance(event, Said) and event.message["op"] == "hello":
            self.jobs.hello(event.sock, Hello.of(event.message), time.monotonic())
        elif isinstance(event, Said):
            self.jobs.said(event.sock, event.message, time.monotonic())
        elif isinstance(event, Closed):
            exited = self.jobs.closed(event.sock)
            if exited is not None:
                self.arbiter.exited(*exited)
        elif isinstance(event, SideEnded):
            self.arbiter.side_ended(event.side)
        elif isinstance(event, RoundStart):
            self.rounds_at.append(time.monotonic())
            self.arbiter.new_round(event.refused, event.first)
