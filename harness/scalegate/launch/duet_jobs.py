"""The duet's jobs (launch/duet.py): each side's job of a case, its ranks' connections and what they last said.

A job is one side's launch of a case, named by its case id (``ddp-cnn-1x2``, ``ddp-cnn-1x2~2`` for that side's second
launch of it in a round). It joins when its ``world`` ranks said hello; it is ``ready`` for a turn when every rank
still in the job asked for one, and ``gone`` when it failed or every rank said ``bye``. ``Jobs`` turns a rank's hello
into its job: a later round's launch of a case takes the name again, and the earlier job, gone, is kept in
``finished`` for the report.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from scalegate.contract import duet


def other(side: str) -> str:
    """The partner's side."""
    return "base" if side == "head" else "head"


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


@dataclass(frozen=True, kw_only=True)
class Hello:
    """A rank's first message: the job it belongs to."""

    side: str
    job: str
    rank: int
    world: int
    node: int = 0

    @classmethod
    def of(cls, message: dict[str, Any]) -> "Hello":
        return cls(
            side=str(message["side"]),
            job=str(message["job"]),
            rank=int(message["rank"]),
            world=int(message["world"]),
            node=int(message.get("node", 0)),
        )


class Jobs:
    """Every job of the rounds so far, by (side, name), and which job and rank each rank connection is."""

    def __init__(self) -> None:
        self.now: dict[tuple[str, str], Job] = {}
        self.finished: list[Job] = []  # jobs gone, whose name a later round's launch of the case takes again
        self.owners: dict[socket.socket, tuple[Job, int]] = {}

    def hello(self, sock: socket.socket, hello: Hello, at: float) -> Job:
        """The rank joins its job, and waits for the job's first turn."""
        job = self._job(hello, at)
        job.ranks[hello.rank] = sock
        job.nodes[hello.rank] = hello.node
        job.waiting.add(hello.rank)
        self.owners[sock] = (job, hello.rank)
        return job

    def said(self, sock: socket.socket, message: dict[str, Any], at: float) -> None:
        """A rank's ``where`` (a turn held long), ``done`` (its turn given back) or ``bye`` (its job's last turn
        ended); nothing where the connection is no rank's."""
        if sock not in self.owners:
            return
        job, rank = self.owners[sock]
        if message["op"] == "where":
            job.where[rank] = message  # a turn held long: where the rank is, for a hang's message
            return
        job.last_step[rank] = int(message.get("step", -1))
        (job.left if message["op"] == "bye" else job.waiting).add(rank)
        if job.gone and not job.ended:
            job.ended = at

    def closed(self, sock: socket.socket) -> tuple[Job, int] | None:
        """The job and rank whose connection closed mid-duet (before its ``bye``, its job not failed), else None."""
        if sock not in self.owners:
            return None
        job, rank = self.owners.pop(sock)
        return (job, rank) if rank not in job.left and not job.failed else None

    def owns(self, sock: socket.socket) -> bool:
        return sock in self.owners

    def partner(self, job: Job) -> Job | None:
        return self.now.get((other(job.side), job.name))

    def __iter__(self) -> Iterator[Job]:
        return iter(list(self.now.values()))

    def settled(self) -> bool:
        """Every job has left or failed."""
        return all(job.gone for job in self)

    def report(self, at: Callable[[float], float | None]) -> dict[str, dict[str, Any]]:
        """Per side and job, in the order they joined: paired or solo (and why), turns granted, a failure, and its
        timeline (``at``: a time.monotonic() in seconds since the coordinator started)."""
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
            for n, j in enumerate([*self.finished, *self.now.values()])
        }

    def close(self) -> None:
        for job in self.now.values():
            for sock in job.ranks.values():
                sock.close()

    def _job(self, hello: Hello, at: float) -> Job:
        key = (hello.side, hello.job)
        if key in self.now and self.now[key].gone:  # the same case's launch in a later round
            self.finished.append(self.now.pop(key))
        if key not in self.now:
            self.now[key] = Job(side=hello.side, name=hello.job, world=hello.world, since=at)
            partner = (other(hello.side), hello.job)
            if partner in self.now and self.now[partner].gone:  # a new job's partner that is gone is an earlier round's
                self.finished.append(self.now.pop(partner))
        return self.now[key]
