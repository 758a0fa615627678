"""The duet's turn arbiter (launch/duet.py): one token on the host, and which ready job it goes to next.

A job is granted when it is ready (every rank asked for a turn), it is its turn in its pair's ABBA order (the round's
``first`` side takes a pair's first turn), and no job holds the token. A job without a partner past ``pair_wait_s``
(or once the other side's session has ended) runs solo, holding the token until it leaves. A job that runs whole
(``WholeJobs``: the alternate pairing, a refused case) holds it until it leaves too. A turn not given back within
``turn_s`` stops both jobs (launch/duet_faults.py), as does a rank that exits mid-duet.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from scalegate.contract import duet
from scalegate.launch import duet_faults as faults
from scalegate.launch.duet_grants import Grant, Host, Turns, WholeJobs, give
from scalegate.launch.duet_jobs import Job, Jobs, other
from scalegate.policy import PAIR_WAIT_S, TURN_S


@dataclass(frozen=True, kw_only=True)
class Rules:
    """How the coordinator pairs: the wait for a partner, the turn limit, the steps of a turn after a job's first,
    whether the ranks swap their state out between turns, and whether every job runs whole (alternate)."""

    pair_wait_s: float = PAIR_WAIT_S
    turn_s: float = TURN_S
    turn_steps: int = 1
    swap: bool = False
    alternate: bool = False


class Arbiter:
    """The token and its holder; ``schedule`` after every event passes it on where it is free."""

    def __init__(self, rules: Rules, jobs: Jobs, clock: Callable[[], float] = time.monotonic) -> None:
        self.rules, self.jobs, self.clock = rules, jobs, clock
        self.turns = Turns(limit_s=rules.turn_s, steps=rules.turn_steps, swap=rules.swap)
        self.whole = WholeJobs(rules.pair_wait_s, rules.alternate)
        self.holder: Job | None = None
        self.held_since = 0.0
        self.idle_since = clock()  # when the token was last given back: a wait for a partner counts from it
        self.first = "head"  # the side whose job takes a pair's first turn (its setup first): alternates by round
        self.ended: set[str] = set()  # the sides whose session ended this round

    def new_round(self, refused: dict[str, str], first: str) -> None:
        """A round's sessions start: the sides are back, ``refused`` cases run whole, ``first`` turns first."""
        self.ended.clear()
        self.whole.new_round(refused)
        self.first = first

    def side_ended(self, side: str) -> None:
        self.ended.add(side)

    def exited(self, job: Job, rank: int) -> None:
        """A rank's connection closed mid-duet: its job and its partner stop."""
        partner = self.jobs.partner(job)
        faults.stop(job, partner, faults.exited(job, rank))
        if self.holder in (job, partner):
            self.holder = None

    def schedule(self) -> None:
        """Take the token back from a holder that gave it back, left or hung; then grant the first job due."""
        holder, now = self.holder, self.clock()
        if holder is not None:
            if holder.gone or (not holder.solo and (holder.ready or holder.left == set(holder.ranks))):
                self.holder = None  # its turn was given back (or it left, or failed)
                holder.held += now - self.held_since
                self.idle_since = now
            elif now - self.held_since > self.rules.turn_s and not holder.alternate:  # a whole job: its timeout
                faults.stop(holder, self.jobs.partner(holder), faults.hung(holder, self.rules.turn_s))
                self.holder = None
            else:
                return
        candidates = [j for j in self.jobs if not j.gone and j.ready]
        started = [j for j in candidates if self._pair_turns(j)]
        for job in started + [j for j in candidates if j not in started]:
            grant = self._due(job)
            if grant is not None:
                give(job, grant, self.turns, self.clock())
                self.holder, self.held_since = job, self.clock()
                return

    def _due(self, job: Job) -> Grant | None:
        """What ``job`` is granted now, or None where it must wait."""
        partner = self.jobs.partner(job)
        if job.solo:
            return None
        if self.whole.applies(job):
            return self.whole.decide(job, partner, self._host())
        if partner is None or partner.gone:
            side = other(job.side)
            waited = self.clock() - job.since
            if partner is None and side not in self.ended and waited < self.rules.pair_wait_s:
                return None
            if partner is None:
                return Grant(op="solo", why=f"no {side} job {job.name} joined in {waited:.0f} s")
            if not self._pair_turns(job):
                return Grant(op="solo", why=f"the {side} job left before the turns began")
            return Grant(op="go")  # the partner has left: the rest of this job's turns alone
        if not partner.ready and not partner.left:
            return None  # both must have joined before the first turn; later, it is the partner's step
        turn = self._pair_turns(job)
        # a pair's second turn is the other side's
        due = duet.first_side(turn // 2 + turn % 2, (self.first, other(self.first)))
        if due != job.side and partner.ready and not partner.gone:
            return None
        return Grant(op="go")

    def _pair_turns(self, job: Job) -> int:
        """Turns granted to the pair so far: its position in the ABBA order."""
        partner = self.jobs.partner(job)
        return job.turns + (partner.turns if partner is not None else 0)

    def _host(self) -> Host:
        parked = {j.side for j in self.jobs if j.ready and not j.turns}
        return Host(
            first=self.first,
            ended=frozenset(self.ended),
            parked=frozenset(parked),
            now=self.clock(),
            idle_since=self.idle_since,
        )
