"""The gate's relaunches, in rounds: a case's launches spread over the gate instead of back to back.

Launches seconds apart share a slow phase of the host; launches a minute apart do not. So the gate runs *rounds*:
round 1 is every selected case once; each later round launches only the cases whose sequential verdict is still
undecided, once each, in a fresh pytest session per side. Where both sides of an A/B gate pair (``Pairing``), each
round runs both sides' sessions at once and their jobs take turns through the coordinator (launch/duet.py), step by
step (duet) or one whole job at a time (alternate); otherwise the sides' sessions follow each other, in alternating
order, ``ROUND_GAP_S`` at least between round starts. ``merge`` (gate/merge.py) makes one judge record of every
round's launches of a case. On several nodes node 0 runs this loop and its followers run each round's sessions on
their nodes too (gate/nodes.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

from scalegate import policy
from scalegate.contract.errors import ScalegateError
from scalegate.gate import merge
from scalegate.gate.project import NO_CASES_HINT
from scalegate.gate.sides import Side
from scalegate.record import runfiles

PYTEST_BAD_INPUT = (2, 3, 4, 5)  # interrupted, internal error, usage error, nothing collected
Merged = dict[str, list[dict[str, Any]]]  # each side's merged cases


class Followers(Protocol):
    """The other nodes of a multi-node gate (gate/nodes.py): they run each round's sessions on their nodes."""

    def start_round(self, n: int, args: list[str], first: str) -> None: ...

    def check(self) -> None: ...

    def wait_round(self, n: int) -> None: ...


@dataclass
class Paired:
    """How a round's two sessions share the host: the coordinator, and the sessions' pairing options."""

    coordinator: Any  # launch/duet.Coordinator
    pairing: str  # "duet" or "alternate"
    refusals: Callable[[Merged], dict[str, str]] = lambda merged: {}  # {case id: why} a case pairs whole jobs
    hinted: bool = False  # the gate named --pairing swap for the cases that alternate (once a gate)

    def args(self, side: str) -> list[str]:
        return [
            f"--scaling-duet={self.coordinator.address}",
            f"--scaling-duet-side={side}",
            f"--scaling-duet-pairing={self.pairing}",
        ]


@dataclass
class Outcome:
    merged: Merged
    codes: list[int]  # the head's pytest exit codes, round by round
    runs: dict[str, list[Path]]  # each side's run directory, round by round
    notes: list[str] = field(default_factory=list)  # what the loop did that the verdicts do not say


LIVE: set[subprocess.Popen] = set()  # the sessions running now: a stopped gate ends them (gate/life.py)
_LIBC = ctypes.CDLL(None) if sys.platform.startswith("linux") else None
PR_SET_PDEATHSIG = 1


def _end_with_gate() -> None:
    """In a session's process before it runs: SIGTERM it when the gate's process dies, killed or not, so no session
    (and none of its ranks) outlives a gate."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def gate_progress(n: int, seconds: float, undecided: list[str]) -> str:
    """The gate's line as round ``n`` ends: its time and the cases still undecided."""
    left = f"undecided: {', '.join(undecided)}" if undecided else "every case decided"
    return f"gate: round {n} done in {seconds:.0f}s; {left}"


def counted(name: str, count: int) -> Callable[[int, float, list[str]], str]:
    """The line of a command that runs all its ``count`` rounds, as each ends: ``name: round n/count done in Ns``."""
    return lambda n, seconds, _: f"{name}: round {n}/{count} done in {seconds:.0f}s"


def run(
    sides: list[Side],
    args: list[str],
    gate_dir: Path,
    undecided: Callable[[Merged], list[str]],
    budgets: merge.Budgets,
    *,
    paired: Paired | None = None,
    deadline: float | None = None,
    followers: Followers | None = None,
    on_round: Callable[[int], None] = lambda n: None,
    progress: Callable[[int, float, list[str]], str] = gate_progress,
) -> Outcome:
    """Rounds until no case is undecided or its budget of ``budgets`` is spent (``merge.Budgets.of``). ``deadline``
    (``time.monotonic()``, from ``gate --max-minutes``): no round starts that would end past it by the longest round
    so far; the cases still undecided are then judged on the rounds they had, and why goes to the notes. Neither side
    always runs first: the order alternates by round. ``undecided(merged)`` names the case ids that want another
    round; ``progress(n, seconds, undecided)`` is the line printed as round ``n`` ends."""
    with ending_sessions():
        return _run(sides, args, gate_dir, undecided, budgets, paired, deadline, followers, on_round, progress)


def _run(sides, args, gate_dir, undecided, budgets, paired, deadline, followers, on_round, progress) -> Outcome:
    found: dict[str, list[Path]] = {side.name: [] for side in sides}
    out = Outcome(merged={}, codes=[], runs=found)
    selection: list[str] = []
    walls: list[float] = []
    last = budgets.most
    for n in range(1, last + 1):
        started = time.monotonic()
        on_round(n)
        round_args = [*args, "-k", " or ".join(selection)] if n > 1 else list(args)  # later: the undecided only
        ordered = sides if n % 2 else sides[::-1]
        if followers is not None:
            followers.start_round(n, round_args, ordered[-1].name)
        if paired is not None and len(sides) == 2:
            codes = _paired_round(ordered, round_args, gate_dir, n, paired, out.merged, followers)
        else:
            codes = _sequential_round(ordered, round_args, gate_dir, n)
        if followers is not None:
            followers.wait_round(n)
        for side in sides:
            what = f"round {n} of the gate" + (f" ({side.name} commit)" if len(sides) > 1 else "")
            where = _round_dir(gate_dir, n, side, len(sides))
            found[side.name].append(check_run(codes[side.name], where, what))
        out.codes.append(codes[sides[-1].name])  # the commit under test; the base's failures show as missing cases
        rounds = {name: [runfiles.load_run(p) for p in paths] for name, paths in found.items()}
        out.merged = {name: merge.merge(r, budgets) for name, r in rounds.items()}
        selection = undecided(out.merged)
        print(progress(n, time.monotonic() - started, selection), flush=True)
        if not selection or n == last:
            break
        walls.append(time.monotonic() - started)
        gap = 0.0 if paired is not None else max(0.0, policy.ROUND_GAP_S - walls[-1])  # paired rounds follow at once
        if deadline is not None and time.monotonic() + gap + max(walls) > deadline:
            note = (
                f"the gate stopped after round {n}: another round (up to {max(walls):.0f} s) would have "
                f"ended past its time budget (--max-minutes); {', '.join(selection)} judged on {n} round(s)"
            )
            print(f"gate: {note}", flush=True)
            out.notes.append(note)
            # the budget spent at n rounds, a script's too: the judge reads the undecided cases as noisy
            out.merged = {name: merge.merge(r, merge.Budgets(n)) for name, r in rounds.items()}
            break
        time.sleep(gap)
    return out


def _round_dir(gate_dir: Path, n: int, side: Side, sides: int) -> Path:
    return gate_dir / f"round-{n:02d}" / (side.name if sides > 1 else "")


def _sequential_round(sides: list[Side], args: list[str], gate_dir: Path, n: int) -> dict[str, int]:
    """The sides' sessions one after the other, on the terminal."""
    codes = {}
    for side in sides:
        proc = start(side.command(args, _round_dir(gate_dir, n, side, len(sides))), side)
        codes[side.name] = finish(proc)
    return codes


def _paired_round(
    sides: list[Side], args: list[str], gate_dir: Path, n: int, paired: Paired, merged: Merged, followers=None
) -> dict[str, int]:
    """Both sides' sessions of round ``n`` at once, their jobs taking turns through the coordinator; each session's
    output goes to its ``session.log`` (two sessions would interleave on the terminal). The side started last
    turns first."""
    refused = paired.refusals(merged)
    for case_id, why in refused.items():
        print(f"gate: round {n}, {case_id}: its two jobs alternate whole, one resident at a time: {why}", flush=True)
    if refused and not paired.hinted:
        paired.hinted = True
        print(
            "HINT: --pairing swap keeps such jobs paired in turns of steps, the idle job's training state off the GPU "
            "(docs/duet.md)",
            flush=True,
        )
    paired.coordinator.round_started(refused, first=sides[-1].name)
    procs: dict[str, tuple[subprocess.Popen, Path, Any]] = {}
    for side in sides:
        where = _round_dir(gate_dir, n, side, 2)
        where.mkdir(parents=True, exist_ok=True)
        log = open(where / "session.log", "w")
        procs[side.name] = (start(side.command([*args, *paired.args(side.name)], where), side, log), where, log)
    codes: dict[str, int] = {}
    while len(codes) < len(procs):
        for name, (proc, where, log) in procs.items():
            if name not in codes and proc.poll() is not None:
                log.close()
                paired.coordinator.side_ended(name)  # its partner jobs stop waiting for it
                codes[name] = finish(proc)
                if codes[name] not in (0, 1):
                    tail = (where / "session.log").read_text(errors="replace").splitlines()[-20:]
                    print(f"gate: round {n}, {name} session exited {codes[name]}:\n" + "\n".join(tail), flush=True)
        if followers is not None:
            followers.check()
        time.sleep(0.2)
    return codes


def start(argv: list[str], side: Side, log: Any = None) -> subprocess.Popen:
    """One side's session, known to ``LIVE`` until ``finish``; ``log``: its output's file (else the terminal)."""
    proc = subprocess.Popen(
        argv,
        cwd=side.tree,
        env=side.environment(),
        stdout=log,
        stderr=subprocess.STDOUT if log else None,
        preexec_fn=_end_with_gate,
    )
    LIVE.add(proc)
    return proc


def finish(proc: subprocess.Popen) -> int:
    code = proc.wait()
    LIVE.discard(proc)
    return code


@contextlib.contextmanager
def ending_sessions() -> Iterator[None]:
    """Whatever stops the block (a signal, a failed round, a node gone), the sessions it started end first: before
    the base worktree they run in is removed, and before the coordinator they pair through is closed."""
    try:
        yield
    except BaseException:
        stop_sessions()
        raise


def stop_sessions(grace_s: float = 30.0) -> None:
    """End every session still running: SIGTERM first (each cleans up its ranks, agents and namespaces, and marks its
    run partial: record/run_status.py), SIGKILL for what outlives ``grace_s``."""
    for proc in list(LIVE):
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in list(LIVE):
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        LIVE.discard(proc)


def check_run(returncode: int, run_dir: Path, what: str) -> Path:
    """The run a pytest session wrote under ``run_dir``; bad input when it could not run or wrote none."""
    if returncode == 5:
        raise ScalegateError(f"{what}: no scaling case was selected (pytest exit code 5)", NO_CASES_HINT)
    if returncode in PYTEST_BAD_INPUT:
        raise ScalegateError(
            f"{what}: the scaling suite could not run (pytest exit code {returncode}: see its output above)",
            "check the arguments after `gate`; `pytest --help` lists the --scaling-* options",
        )
    latest = run_dir / "latest"
    if not latest.exists():
        raise ScalegateError(f"{what} wrote no run under {run_dir}", "rerun; read the output above")
    return latest.resolve()
