"""``python -m scalegate record-baselines --rounds N [pytest args]``: a baseline from launches spread in time.

    python -m scalegate record-baselines --rounds 20 -k "cnn and (ddp or fsdp or zero2 or single)"
    python -m scalegate record-baselines --rounds 10 --tolerance 0.25 --local-tolerance 0.25
    python -m scalegate record-baselines --duet-aa 10 -k "(ddp-cnn-1x2 or single-cnn-1x1) and not parity"

``--duet-aa N`` records the duet gate's sigma floor instead (A/A duet rounds: harness/scalegate/cli/record_duet.py).

Launches of a case made back to back share the machine's phase of the moment. On the 2-core VMs
(docs/detection.md, sixth set) fsdp-cnn-1x2's local efficiency spread 1.8% over 10 consecutive launches
and 2.7% over 40 launches in 50 minutes, and its level moved ~2% between quarters of an hour; a baseline
from consecutive launches then carries one phase's offset into every later verdict (3% false alarms
in simulation, against 0.5% for the same number of launches spread in time). So a baseline is recorded
in *rounds*: the whole selection runs N times, one launch per case per round (``--scaling-launches 1``,
no relaunches), each round a pytest session of its own, and the rounds are merged exactly as
``python -m scalegate update-baselines RUN RUN ...`` merges runs: the median launch, the spread of ln(local
efficiency) between launches as the sequential gate's sigma, their count. A case's launches are then as
far apart as the selection takes to run once.

A round whose pytest fails a case against the *old* baseline still counts (its measurements are what
they are); a correctness failure or an injected fault refuses the whole recording (``update``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from scalegate.cli.project import Project
from scalegate.contract import checkout
from scalegate.contract.errors import ScalegateError
from scalegate.plan.option_groups import add_recorded_tolerance_options

# One launch per case per round: relaunches would put consecutive launches back into the baseline.
ROUND = ["--scaling-launches", "1", "--scaling-max-launches", "1", "--scaling-confirm", "0"]
PYTEST_BAD_INPUT = (2, 3, 4, 5)  # interrupted, internal error, usage error, nothing collected


def round_argv(user_args: list[str], results_dir: Path, project: Project | None = None) -> list[str]:
    """One round's pytest command: the user's selection (their test paths, else the repository's: ``scaling_tests``
    in scalegate's own, its pytest.ini's elsewhere), one launch each."""
    project = project or Project.find()
    paths = [a for a in user_args if not a.startswith("-") and (project.root / a.split("::")[0]).exists()]
    tests = ["scaling_tests"] if project.own else []
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        *([] if paths else tests),
        *user_args,
        *ROUND,
        "--scaling-results-dir",
        str(results_dir),
    ]


def run_rounds(rounds: int, user_args: list[str], results_dir: Path) -> list[Path]:
    """Run the selection ``rounds`` times; the run directory of every round that produced results."""
    runs, project = [], Project.find()
    for i in range(rounds):
        round_dir = results_dir / f"round-{i + 1:02d}"
        started = time.time()
        done = subprocess.run(
            round_argv(user_args, round_dir, project),
            cwd=project.root,
            env=checkout.environment(dict(os.environ), project.root),
        )
        if done.returncode in PYTEST_BAD_INPUT:
            raise ScalegateError(
                f"round {i + 1} of {rounds}: the scaling suite could not run (pytest exit code "
                f"{done.returncode}: see its output above)",
                "check the arguments after `record-baselines`; `pytest --help` lists the --scaling-* options",
            )
        latest = round_dir / "latest"
        if not latest.exists():
            raise ScalegateError(f"round {i + 1} of {rounds} wrote no run under {round_dir}", "read the output above")
        runs.append(latest.resolve())
        print(f"record-baselines: round {i + 1}/{rounds} done in {time.time() - started:.0f}s ({runs[-1]})", flush=True)
    return runs


def main(args: argparse.Namespace, user_args: list[str]) -> int:
    from scalegate.record import update
    from scalegate.record.merge import merged_runs

    if args.duet_aa is not None:  # the duet gate's sigma floor instead (harness/scalegate/cli/record_duet.py)
        from scalegate.cli import record_duet

        if args.rounds is not None:
            raise ScalegateError(
                "--rounds and --duet-aa both given", "--duet-aa N runs N A/A duet rounds: drop --rounds"
            )
        for line in record_duet.record(args.duet_aa, user_args, Path(args.results_dir), Path(args.baseline_dir)):
            print(line)
        return 0
    args.rounds = 10 if args.rounds is None else args.rounds
    if not 1 <= args.rounds <= 100:
        raise ScalegateError(f"--rounds {args.rounds} is not in 1..100", "10-20 rounds give the gate a steady sigma")
    results_dir = Path(args.results_dir) / time.strftime("record-%Y%m%d-%H%M%S")
    runs = run_rounds(args.rounds, user_args, results_dir)
    for line in update.update_from_run(
        merged_runs([str(r) for r in runs]), Path(args.baseline_dir), args.tolerance, args.local_tolerance
    ):
        print(line)
    return 0


def add_parser(sub, baseline_dir: str) -> None:
    r = sub.add_parser(
        "record-baselines",
        help="record baselines from N rounds of the selection, launches spread in time",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("--rounds", type=int, help="times the whole selection runs (default: 10)")
    r.add_argument(
        "--duet-aa",
        type=int,
        metavar="N",
        help="instead: N A/A duet rounds of the selection (the checkout against itself, as `gate --base` runs a "
        "round); each case's spread between rounds becomes the duet gate's sigma floor (docs/duet.md)",
    )
    r.add_argument("--results-dir", default="results", help="the rounds go under RESULTS_DIR/record-<time>/")
    r.add_argument("--baseline-dir", default=baseline_dir)
    add_recorded_tolerance_options(r.add_argument, prefix="")  # checked before the first round, not after the last
    r.set_defaults(func=None, rounds_command=True)
