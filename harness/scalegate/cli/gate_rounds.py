"""The PR gate's relaunches, in rounds: a case's launches spread over the gate instead of back to back.

On the 2-core VMs a case's local efficiency has a slow component: launches seconds apart share it, launches
a minute apart do not (docs/detection.md, sixth set: fsdp-cnn-1x2 read 0.436, 0.446, 0.415 in three
back-to-back launches of one gate run against a baseline of 0.467; across 40 launches a minute apart the lag-1
correlation was -0.16). Back-to-back relaunches then confirm the phase, not the code, and the sequential
test's "one odd launch is confirmed by a second" fails. So the single-node gate runs *rounds*: round 1 is
every selected scaling case once; each later round
launches only the cases whose sequential verdict is still undecided, once each, in a fresh pytest session
(``ROUND_GAP_S`` at least between round starts; a duet's rounds follow each other at once, since both sides
share the phase step by step); the judge sees every round's launches of a case as one
record (``merge``), in launch order, exactly as one session's relaunches would give them. The merged
result files go to ``<results dir>/<gate run>/merged`` (``latest`` points there), so ``python -m scalegate
compare`` re-judges the gate's own verdicts from them. Parity runs before the rounds in a session of its
own with the whole budget: it pairs the two front ends step by step inside each launch, so the slow
component cancels in its ratios, and its relaunches may follow each other.

Multi-node SLURM allocations keep the in-session relaunches: every node's agent must take part in each
launch, and the nodes would have to agree on each round's selection.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from scalegate.cli.project import NO_CASES_HINT
from scalegate.contract import atomic, checkout, duet
from scalegate.contract.errors import ScalegateError
from scalegate.judge import CaseRecord
from scalegate.judge import duet as judge_duet
from scalegate.judge.evidence import PAIRED, LaunchRecord, threads_of
from scalegate.launch import duet_fit
from scalegate.plan import hostinfo
from scalegate.record import baselines, runfiles

# At least this long between the starts of two rounds. SCALEGATE_ROUND_GAP_S shortens it where the drop is far
# larger than the host's slow phases (the suite's own end-to-end tests of an injected slowdown), never for a gate.
ROUND_GAP_S = float(os.environ.get("SCALEGATE_ROUND_GAP_S", 30))
PYTEST_BAD_INPUT = (2, 3, 4, 5)  # interrupted, internal error, usage error, nothing collected


def merge(rounds: list[list[dict[str, Any]]], budget: int, script_budget: int | None = None) -> list[dict[str, Any]]:
    """Every case's result files of all rounds as one: launches and reference steps in round order (a duet round's
    launches pooled into one: ``pooled``), the judge's budget the gate's (a round's own session ran with a budget of
    one launch), a training script's in a duet ``script_budget`` where given (``contract.duet.script_rounds``)."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for cases in rounds:
        for case in cases:
            by_key.setdefault(case["key"], []).append(case)
    merged = []
    for group in by_key.values():
        records = [
            CaseRecord.from_dict(c.get("record") or {}, f"result file of {c.get('case_id', '?')}") for c in group
        ]
        first = records[0]
        in_duet = any(launch.duet for r in records for launch in r.launches)
        own = script_budget if script_budget and in_duet and judge_duet.is_script(first) else budget
        record = dataclasses.replace(
            first,
            launches=tuple(
                dataclasses.replace(
                    launch,
                    reference_step_times_s=r.reference_step_times_s,
                    reference_lengths=r.reference_lengths,
                    reference_duet=r.reference_duet,
                )
                for r in records
                for launch in pooled(r.launches)
            ),
            reference_step_times_s=tuple(t for r in records for t in r.reference_step_times_s),
            reference_lengths=tuple(n for r in records for n in r.reference_lengths),
            reference_launches=sum(r.reference_launches for r in records),
            problems=tuple(dict.fromkeys(p for r in records for p in r.problems)),
            failure=next((r.failure for r in records if r.failure), ""),
            conduct=dataclasses.replace(first.conduct, max_launches=own),
        )
        merged.append({**group[-1], "record": record.to_dict(), "launches": len(record.launches), "rounds": len(group)})
    return merged


def pooled(launches: Sequence[LaunchRecord]) -> tuple[LaunchRecord, ...]:
    """A duet round's launches of a case as one launch, as its 1x1 reference's already are: the judge reads a round
    as one estimate (judge/duet.py pairs launch n of the head with launch n of the base, by ``lengths``), so the
    round's one reference is not counted once per launch. Today's rounds keep their launches apart."""
    if len(launches) < 2 or not any(launch.duet for launch in launches):
        return tuple(launches)
    peaks = [launch.peak_memory_bytes for launch in launches]
    return (
        dataclasses.replace(
            launches[0],
            step_times_s=tuple(t for launch in launches for t in launch.step_times_s),
            lengths=tuple(len(launch.step_times_s) for launch in launches),
            pair_step_times_s=tuple(t for launch in launches for t in launch.pair_step_times_s),
            local_step_times_s=tuple(t for launch in launches for t in launch.local_step_times_s),
            final_loss=launches[-1].final_loss,
            peak_memory_bytes=tuple(map(max, zip(*peaks))) if len(set(map(len, peaks))) == 1 else peaks[0],
            duet=next((launch.duet for launch in launches if launch.duet != PAIRED), PAIRED),
            duet_threads=threads_of([launch.duet_threads for launch in launches]),
        ),
    )


def multi_node_slurm() -> bool:
    try:
        return int(os.environ.get("SLURM_NNODES") or os.environ.get("SLURM_JOB_NUM_NODES") or 1) > 1
    except ValueError:
        return False


def budget_of(user_args: list[str], default: int) -> int:
    """The user's --scaling-max-launches (the last one wins, as in pytest), else the gate's."""
    found = default
    for i, arg in enumerate(user_args):
        if arg == "--scaling-max-launches" and i + 1 < len(user_args):
            found = int(user_args[i + 1]) if user_args[i + 1].isdigit() else found
        elif arg.startswith("--scaling-max-launches="):
            value = arg.split("=", 1)[1]
            found = int(value) if value.isdigit() else found
    return found


@dataclass(frozen=True, kw_only=True)
class Side:
    """One commit's sessions: they run in its checkout (its harness, workloads and tests), one per round."""

    name: str  # "head" (the working tree) or "base" (the PR's base commit, harness/scalegate/cli/worktree.py)
    tree: Path
    argv: Callable[[list[str], Path], list[str]]  # (pytest arguments, the round's results dir) -> the command
    drop: tuple[str, ...] = ()  # environment variables its sessions must not inherit (another venv's side)


def older_plugin(tree: Path) -> list[str]:
    """A commit from before scalegate was one import name registers its plugin as ``harness.plugin`` from its
    conftest.py; the installed ``scalegate.plugin`` must then stay out of its session (the two would declare the
    same options)."""
    conftest = tree / "conftest.py"
    return ["-p", "no:scalegate.plugin"] if conftest.is_file() and "harness.plugin" in conftest.read_text() else []


def run(
    sides: list[Side],
    user_args: list[str],
    gate_dir: Path,
    undecided: Callable[[dict[str, list[dict[str, Any]]]], list[str]],
    budget: int,
    coordinator: Any = None,
    baseline_dir: Path | None = None,
    script_budget: int | None = None,
    deadline: float | None = None,
    notes: list[str] | None = None,
) -> tuple[dict[str, list[dict[str, Any]]], list[int]]:
    """Rounds until no case is undecided or the budget is spent: (every side's merged cases, the head's pytest
    exit codes). ``deadline`` (``time.monotonic()``, from ``gate --max-minutes``): no round starts that would end
    past it by the longest round so far; the cases still undecided are then judged with the rounds they had
    (``noisy``), and why goes to ``notes``. With two sides (A/B) each round launches both, in alternating order, so
    neither commit always runs first after the pause; with a duet ``coordinator`` (launch/duet.py) both sessions
    run at once and their jobs take turns step by step (docs/duet.md), but for the cases whose two jobs would not
    fit in GPU memory (``duet_refusals``, with the stored peaks of ``baseline_dir``). ``undecided(merged)`` names the
    case ids that want another round; ``script_budget``: a training script's own budget in a duet (``merge``)."""
    rounds: dict[str, list[list[dict[str, Any]]]] = {side.name: [] for side in sides}
    codes: list[int] = []
    selection: list[str] = []
    merged: dict[str, list[dict[str, Any]]] = {}
    walls: list[float] = []
    for n in range(1, budget + 1):
        started = time.monotonic()
        extra = ["-k", " or ".join(selection)] if n > 1 else []  # later rounds: only the undecided cases
        if coordinator is not None and len(sides) == 2:
            refused = duet_refusals(merged, baseline_dir)
            for case_id, why in refused.items():
                print(f"gate: round {n}, {case_id}: no duet, its two jobs run one after the other: {why}", flush=True)
            # neither side always has its session started first, nor sets up and steps first (launch/duet.py):
            # the side started last turns first
            ordered = sides if n % 2 else sides[::-1]
            coordinator.round_started(refused, first=ordered[-1].name)
            for side, (code, where) in _duet_round(ordered, [*user_args, *extra], gate_dir, n, coordinator).items():
                what = f"round {n} of the gate ({side} commit, duet)"
                rounds[side].append(runfiles.load_run(check_run(code, where, what)))
                if side == sides[-1].name:
                    codes.append(code)
            sides_run: list[Side] = []
        else:
            sides_run = sides if n % 2 else sides[::-1]
        for side in sides_run:
            where = gate_dir / f"round-{n:02d}" / (side.name if len(sides) > 1 else "")
            done = subprocess.run(
                [*side.argv([*user_args, *extra, "--scaling-max-launches", "1"], where), *older_plugin(side.tree)],
                cwd=side.tree,
                env=checkout.environment(  # each commit imports its own scalegate
                    {k: v for k, v in os.environ.items() if k not in side.drop}, side.tree
                ),
            )
            what = f"round {n} of the gate" + (f" ({side.name} commit)" if len(sides) > 1 else "")
            rounds[side.name].append(runfiles.load_run(check_run(done.returncode, where, what)))
            if side.name == sides[-1].name:  # the commit under test; the base's failures show as its missing cases
                codes.append(done.returncode)
        merged = {name: merge(found, budget, script_budget) for name, found in rounds.items()}
        selection = undecided(merged)
        print(
            f"gate: round {n} done in {time.monotonic() - started:.0f}s; "
            f"{'undecided: ' + ', '.join(selection) if selection else 'every case decided'}",
            flush=True,
        )
        if not selection or n == budget:
            break
        walls.append(time.monotonic() - started)
        # a duet's rounds pair head and base in time: a phase they share cancels, so they follow at once
        gap = 0.0 if coordinator is not None else max(0.0, ROUND_GAP_S - walls[-1])
        if deadline is not None and time.monotonic() + gap + max(walls) > deadline:
            note = (
                f"the gate stopped after round {n}: another round (up to {max(walls):.0f} s) would have "
                f"ended past its time budget (--max-minutes); {', '.join(selection)} judged on {n} round(s)"
            )
            print(f"gate: {note}", flush=True)
            if notes is not None:
                notes.append(note)
            # the budget spent at n rounds, a script's too: the judge reads the undecided cases as noisy
            merged = {name: merge(found, n) for name, found in rounds.items()}
            break
        time.sleep(gap)
    return merged, codes


def duet_refusals(merged: dict[str, list[dict[str, Any]]], baseline_dir: Path | None) -> dict[str, str]:
    """{case id: why} for the cases whose two resident jobs would not fit in GPU memory this round
    (launch/duet_fit.py): their peaks from the rounds so far (``merged``), else from the stored baseline."""
    free = duet_fit.free_bytes()
    if free is None:
        return {}  # no GPU: nothing to check (launch/duet_fit.py)
    stored = baselines.load(baseline_dir, hostinfo.detect().profile) if baseline_dir is not None else None
    return duet_fit.refusals(duet_fit.needs(merged, stored.cases if stored else {}), free)


def _duet_round(
    sides: list[Side], args: list[str], gate_dir: Path, n: int, coordinator: Any
) -> dict[str, tuple[int, Path]]:
    """Both sides' sessions of round ``n`` at once, their ranks taking turns through ``coordinator``; each session's
    output goes to its ``session.log`` (two sessions would interleave on the terminal). {side: (exit code, dir)}."""
    procs: dict[str, tuple[subprocess.Popen, Path, Any]] = {}
    for side in sides:
        where = gate_dir / f"round-{n:02d}" / side.name
        where.mkdir(parents=True, exist_ok=True)
        env = checkout.environment({k: v for k, v in os.environ.items() if k not in side.drop}, side.tree)
        env.update({duet.ADDRESS_ENV: coordinator.address, duet.SIDE_ENV: side.name})
        log = open(where / "session.log", "w")
        cmd = [*side.argv([*args, "--scaling-max-launches", "1"], where), *older_plugin(side.tree)]
        procs[side.name] = (
            subprocess.Popen(cmd, cwd=side.tree, env=env, stdout=log, stderr=subprocess.STDOUT),
            where,
            log,
        )
    done: dict[str, tuple[int, Path]] = {}
    while len(done) < len(procs):
        for name, (proc, where, log) in procs.items():
            if name not in done and proc.poll() is not None:
                log.close()
                coordinator.side_ended(name)  # its partner jobs stop waiting for it
                done[name] = (proc.returncode, where)
                if proc.returncode not in (0, 1):
                    tail = (where / "session.log").read_text(errors="replace").splitlines()[-20:]
                    print(f"gate: round {n}, {name} session exited {proc.returncode}:\n" + "\n".join(tail), flush=True)
        time.sleep(0.2)
    return done


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


def write_merged(
    gate_dir: Path,
    cases: list[dict[str, Any]],
    parity_run: Path | None,
    results_dir: Path,
    base_cases: list[dict[str, Any]] | None = None,
    base: dict[str, str] | None = None,
) -> Path:
    """The gate's run directory: the merged cases, parity's results, an A/B run's base commit's merged cases in
    ``base/`` (with ``base/commit.json``), and ``results_dir/latest`` pointing at it."""
    merged_dir = gate_dir / "merged"
    merged_dir.mkdir(parents=True, exist_ok=True)
    for case in cases:
        atomic.write_json(merged_dir / f"{case['case_id']}.json", case)
    if base_cases is not None:
        (merged_dir / "base").mkdir(exist_ok=True)
        for case in base_cases:
            atomic.write_json(merged_dir / "base" / f"{case['case_id']}.json", case)
        (merged_dir / "base" / "commit.json").write_text(json.dumps(base or {}, indent=2) + "\n")
    if parity_run is not None and (parity_run / "parity").is_dir():
        shutil.copytree(parity_run / "parity", merged_dir / "parity", dirs_exist_ok=True)
    (merged_dir / "rounds.json").write_text(
        json.dumps(sorted(str(p) for p in gate_dir.glob("round-*/**/latest")), indent=2) + "\n"
    )
    latest = results_dir / "latest"
    if latest.is_symlink() or latest.exists():
        latest.unlink()
    latest.symlink_to(merged_dir.resolve(), target_is_directory=True)
    return merged_dir
