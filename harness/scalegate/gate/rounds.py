"""The gate's relaunches, in rounds: a case's launches spread over the gate instead of back to back.

Launches seconds apart share a slow phase of the host; launches a minute apart do not. So the gate runs *rounds*:
round 1 is every selected case once; each later round launches only the cases whose sequential verdict is still
undecided, once each, in a fresh pytest session per side. Where both sides of an A/B gate pair (``Paired``), each
round runs both sides' sessions at once (gate/paired.py) and their jobs take turns through the coordinator
(launch/duet.py), step by step (duet) or one whole job at a time (alternate); otherwise the sides' sessions follow each
other, in alternating order, ``ROUND_GAP_S`` at least between round starts. ``merge`` (gate/merge.py) makes one judge
record of every round's launches of a case. On several nodes node 0 runs this loop and its followers run each round's
sessions on their nodes too (gate/nodes.py).

    found = rounds.run(rounds.Rounds(sides=..., args=..., gate_dir=..., undecided=..., budgets=..., sessions=...))
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from scalegate import policy
from scalegate.gate import merge
from scalegate.gate.paired import Merged, Paired, Place, at_once
from scalegate.gate.sessions import Sessions, check_run
from scalegate.gate.sides import RoundSide
from scalegate.record import runfiles

Cases = list[dict[str, Any]]  # one run's result files


class Followers(Protocol):
    """The other nodes of a multi-node gate (gate/nodes.py): they run each round's sessions on their nodes."""

    def start_round(self, n: int, args: list[str], first: str) -> None: ...

    def check(self) -> None: ...

    def wait_round(self, n: int) -> None: ...


def gate_progress(n: int, seconds: float, undecided: list[str]) -> str:
    """The gate's line as round ``n`` ends: its time and the cases still undecided."""
    left = f"undecided: {', '.join(undecided)}" if undecided else "every case decided"
    return f"gate: round {n} done in {seconds:.0f}s; {left}"


def counted(name: str, count: int) -> Callable[[int, float, list[str]], str]:
    """The line of a command that runs all its ``count`` rounds, as each ends: ``name: round n/count done in Ns``."""
    return lambda n, seconds, _: f"{name}: round {n}/{count} done in {seconds:.0f}s"


def _no_hook(n: int) -> None:
    pass


@dataclass(frozen=True, kw_only=True)
class Rounds:
    """What a gate's rounds run: ``sides`` (one, or base and head) in ``sessions``, each round's sessions writing
    under ``gate_dir``; ``args``: the user's pytest arguments, to every session. Rounds go on until ``undecided``
    names no case or a case's budget of ``budgets`` is spent (``merge.Budgets.of``). ``deadline``
    (``time.monotonic()``, from ``gate --max-minutes``): no round starts that would end past it by the longest round
    so far. ``on_round(n)`` as round ``n`` starts; ``progress(n, seconds, undecided)`` is the line printed as it
    ends."""

    sides: Sequence[RoundSide]
    args: Sequence[str]
    gate_dir: Path
    undecided: Callable[[Merged], list[str]]
    budgets: merge.Budgets
    sessions: Sessions
    paired: Paired | None = None
    followers: Followers | None = None
    deadline: float | None = None
    on_round: Callable[[int], None] = _no_hook
    progress: Callable[[int, float, list[str]], str] = gate_progress


@dataclass(frozen=True, kw_only=True)
class Outcome:
    merged: Merged
    codes: tuple[int, ...]  # the head's pytest exit codes, round by round
    runs: dict[str, list[Path]]  # each side's run directory, round by round
    notes: tuple[str, ...] = ()  # what the loop did that the verdicts do not say


def run(rounds: Rounds) -> Outcome:
    """Every round, until no case is undecided, its budget is spent or the deadline is near; the cases still
    undecided at the deadline are then judged on the rounds they had, and why goes to the notes. Neither side always
    runs first: the order alternates by round."""
    with rounds.sessions.ending():
        return _Loop(rounds).run()


@dataclass
class _Loop:
    r: Rounds
    found: dict[str, list[Path]] = field(default_factory=dict)  # each side's run directories, round by round
    merged: Merged = field(default_factory=dict)
    codes: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    hinted: bool = False  # the gate named --pairing swap for the cases that alternate (once a gate)

    def run(self) -> Outcome:
        r = self.r
        self.found = {side.name: [] for side in r.sides}
        selection: list[str] = []
        walls: list[float] = []
        for n in range(1, r.budgets.most + 1):
            started = time.monotonic()
            r.on_round(n)
            args = [*r.args, "-k", " or ".join(selection)] if n > 1 else list(r.args)  # later: the undecided only
            runs = self._read(n, self._round(n, args))
            selection = r.undecided(self.merged)
            print(r.progress(n, time.monotonic() - started, selection), flush=True)
            if not selection or n == r.budgets.most:
                break
            walls.append(time.monotonic() - started)
            gap = 0.0 if r.paired is not None else max(0.0, policy.ROUND_GAP_S - walls[-1])  # paired: at once
            if r.deadline is not None and time.monotonic() + gap + max(walls) > r.deadline:
                self._stop_early(n, max(walls), selection, runs)
                break
            time.sleep(gap)
        return Outcome(merged=self.merged, codes=tuple(self.codes), runs=self.found, notes=tuple(self.notes))

    def _round(self, n: int, args: list[str]) -> dict[str, int]:
        """Round ``n``'s sessions, the other nodes' too; each side's exit code."""
        r = self.r
        ordered = list(r.sides) if n % 2 else list(r.sides)[::-1]
        if r.followers is not None:
            r.followers.start_round(n, args, ordered[-1].name)
        if r.paired is not None and len(r.sides) == 2:
            codes = self._paired(n, ordered, args, r.paired)
        else:
            codes = {}
            for side in ordered:  # one after the other, on the terminal
                where = Place(gate_dir=r.gate_dir, n=n).of(side.name, len(ordered))
                proc = r.sessions.start(side.command(args, where), tree=side.tree, env=side.environment())
                codes[side.name] = r.sessions.finish(proc)
        if r.followers is not None:
            r.followers.wait_round(n)
        return codes

    def _read(self, n: int, codes: dict[str, int]) -> dict[str, list[Cases]]:
        """Round ``n``'s runs, checked and added to each side's earlier ones; every side's rounds so far, merged."""
        sides, place = self.r.sides, Place(gate_dir=self.r.gate_dir, n=n)
        for side in sides:
            what = f"round {n} of the gate" + (f" ({side.name} commit)" if len(sides) > 1 else "")
            self.found[side.name].append(check_run(codes[side.name], place.of(side.name, len(sides)), what))
        self.codes.append(codes[sides[-1].name])  # the commit under test; the base's failures show as missing cases
        runs = {name: [runfiles.load_run(p) for p in paths] for name, paths in self.found.items()}
        self.merged = {name: merge.merge(each, self.r.budgets) for name, each in runs.items()}
        return runs

    def _paired(self, n: int, ordered: list[RoundSide], args: list[str], paired: Paired) -> dict[str, int]:
        """Both sessions at once, on this node (node 0); the side started last turns first."""
        refused = paired.refusals(self.merged)
        for case_id, why in refused.items():
            print(
                f"gate: round {n}, {case_id}: its two jobs alternate whole, one resident at a time: {why}", flush=True
            )
        if refused and not self.hinted:
            self.hinted = True
            print(
                "HINT: --pairing swap keeps such jobs paired in turns of steps, the idle job's training state off the GPU "
                "(docs/duet.md)",
                flush=True,
            )
        assert paired.coordinator is not None  # node 0 runs the rounds, and its coordinator
        paired.coordinator.round_started(refused, first=ordered[-1].name)
        watch = _Leading(n=n, paired=paired, followers=self.r.followers)
        return at_once(ordered, args, Place(gate_dir=self.r.gate_dir, n=n), paired, self.r.sessions, watch)

    def _stop_early(self, n: int, longest: float, selection: list[str], runs: dict[str, list[Cases]]) -> None:
        """Another round would end past the deadline: the cases still undecided are judged on the ``n`` they had."""
        note = (
            f"the gate stopped after round {n}: another round (up to {longest:.0f} s) would have "
            f"ended past its time budget (--max-minutes); {', '.join(selection)} judged on {n} round(s)"
        )
        print(f"gate: {note}", flush=True)
        self.notes.append(note)
        # the budget spent at n rounds, a script's too: the judge reads the undecided cases as noisy
        self.merged = {name: merge.merge(each, merge.Budgets(n)) for name, each in runs.items()}


@dataclass(frozen=True, kw_only=True)
class _Leading:
    """Node 0's watch over its paired round (gate/paired.py ``Watch``): the coordinator told as each session ends
    (its partner jobs stop waiting for it), a session that failed shown, the followers heard meanwhile."""

    n: int
    paired: Paired
    followers: Followers | None

    def ended(self, side: str, code: int, log: Path) -> None:
        assert self.paired.coordinator is not None
        self.paired.coordinator.side_ended(side)
        if code not in (0, 1):
            tail = log.read_text(errors="replace").splitlines()[-20:]
            print(f"gate: round {self.n}, {side} session exited {code}:\n" + "\n".join(tail), flush=True)

    def wait(self) -> None:
        if self.followers is not None:
            self.followers.check()
        time.sleep(0.2)
