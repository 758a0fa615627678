"""The duet's grants (launch/duet.py): what a job is given when the token is its, and when a job runs whole.

Three grants (docs/duet.md): a turn (``go``: a job's first turn, its setup, is one step; later turns ``turn_steps``;
with ``swap`` the ranks swap their training state in for the turn and out after it), the whole job (``alone``: the
alternate pairing, or a case refused for the round because two resident jobs would not fit in GPU memory), or the rest
of the job without a partner (``solo``). ``give`` tells the job's waiting ranks and records the grant on the job.

``WholeJobs`` decides when a job runs whole: when it is its pair's turn in the round's ABBA order (its partner has
left, or its side is due first) and the other side is parked, or alone when its partner has not joined while the host
was idle for ``pair_wait_s``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from scalegate.contract import duet
from scalegate.launch.duet_jobs import Job, other


@dataclass(frozen=True, kw_only=True)
class Grant:
    """What a job is given: a turn (``go``), the whole job (``alone``) or the rest of it without a partner
    (``solo``); ``why`` says why for the last two."""

    op: Literal["go", "alone", "solo"]
    why: str = ""


@dataclass(frozen=True, kw_only=True)
class Turns:
    """What a turn grants: its limit, the steps of a turn after a job's first, and whether the ranks swap."""

    limit_s: float
    steps: int = 1
    swap: bool = False


@dataclass(frozen=True, kw_only=True)
class Host:
    """The host as a grant sees it at one moment: the round's first side, the sides whose session ended, the sides
    with a job parked (joined, every rank waiting for its first turn), the time and when the token was last free."""

    first: str
    ended: frozenset[str]
    parked: frozenset[str]
    now: float
    idle_since: float


def give(job: Job, grant: Grant, turns: Turns, now: float) -> None:
    """Tell ``job``'s waiting ranks what they are granted, and record it on the job."""
    if grant.op == "go":
        job.turns += 1
        job.first_turn = job.first_turn or now
        go = {"op": "go", "turn": job.turns, "limit_s": turns.limit_s, "steps": 1 if job.turns == 1 else turns.steps}
        if turns.swap:
            go["swap"] = True
        job.tell(go, set(job.waiting))
        job.where.clear()
    else:
        if grant.op == "alone":
            job.alternate = True
            job.turns += 1
            job.first_turn = job.first_turn or now
        job.solo = grant.why
        job.tell({"op": grant.op, "why": grant.why}, set(job.waiting))
    job.waiting.clear()


class WholeJobs:
    """The jobs that run whole: every job in the alternate pairing (``alternate``), and in a duet the jobs of the cases
    the round refused (``new_round``)."""

    def __init__(self, pair_wait_s: float, alternate: bool) -> None:
        self.pair_wait_s, self.alternate = pair_wait_s, alternate
        self.refused: dict[str, str] = {}  # {case id: why} this round's jobs of it run whole (launch/duet_fit.py)
        self.pair_order: dict[str, int] = {}  # each pair's place in the round's ABBA order, by job name

    def new_round(self, refused: dict[str, str]) -> None:
        self.refused, self.pair_order = dict(refused), {}

    def applies(self, job: Job) -> bool:
        """Whether ``job`` runs whole: it does, and has not started."""
        return (self.alternate or job.name in self.refused) and not job.turns

    def decide(self, job: Job, partner: Job | None, host: Host) -> Grant | None:
        """``job`` runs whole now if it is its pair's turn in the round's ABBA order (its partner has left, or it is
        the side due first) and the other side is parked, or alone if its partner has not joined while the host was
        idle for ``pair_wait_s``; None: not yet."""
        side = other(job.side)
        why = self.refused.get(job.name) or "alternate pairing"
        waited = host.now - max(job.since, host.idle_since)
        if partner is not None and (partner.gone or partner.turns):
            if partner.gone and self._parked(side, waited, host):
                return Grant(op="alone", why=f"{why}: after the {side} job")
            return None
        index = self.pair_order.setdefault(job.name, len(self.pair_order))
        if duet.first_side(index, (host.first, other(host.first))) == job.side:
            return Grant(op="alone", why=f"{why}: before the {side} job") if self._parked(side, waited, host) else None
        if partner is None and (side in host.ended or waited >= self.pair_wait_s):
            return Grant(op="solo", why=f"no {side} job {job.name} joined in {waited:.0f} s")
        return None

    def _parked(self, side: str, waited: float, host: Host) -> bool:
        """Whether ``side``'s session is idle, so a job of the other side may run whole: it has ended, or a job of
        it has joined and every rank waits for its first turn (before it touches the device). Between its jobs a
        session imports, spawns ranks and writes results, which slows a job beside it
        (docs/evidence/alternate.md#the-other-session-parked). Past ``pair_wait_s`` of waiting it counts as
        parked, so a session that died without a word stops nothing."""
        return side in host.ended or waited >= self.pair_wait_s or side in host.parked
