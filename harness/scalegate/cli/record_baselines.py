"""``python -m scalegate record-baselines --rounds N [pytest args]``: a baseline from launches spread in time.

    python -m scalegate record-baselines --rounds 20 -k "cnn and (ddp or fsdp or zero2 or single)"
    python -m scalegate record-baselines --rounds 10 --tolerance 0.25 --local-tolerance 0.25
    python -m scalegate record-baselines --duet-aa 10 -k "(ddp-cnn-1x2 or single-cnn-1x1) and not parity"

``--duet-aa N`` records the duet gate's sigma floor instead (A/A duet rounds: cli/record_duet.py).

Launches of a case made back to back share the machine's phase of the moment, and a baseline from them would carry
that phase's offset into every later verdict (docs/gate.md). So a baseline is recorded in *rounds*, the gate's
(gate/rounds.py): the whole selection runs N times, one launch per case per round (``--scaling-launches 1``, no
relaunches), each round a pytest session of its own, and the rounds are merged exactly as ``python -m scalegate
update-baselines RUN RUN ...`` merges runs: the median launch, the spread of ln(local efficiency) between launches as
the sequential gate's sigma, their count.

A round whose pytest fails a case against the *old* baseline still counts (its measurements are what
they are); a correctness failure or an injected fault refuses the whole recording (``update``).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from scalegate.cli import forward
from scalegate.contract.errors import ScalegateError
from scalegate.gate import merge, rounds
from scalegate.gate.paired import Merged
from scalegate.gate.project import Project
from scalegate.gate.sessions import Sessions, environment
from scalegate.gate.sides import older_plugin
from scalegate.plan import declare
from scalegate.plan.option_groups import Recorded
from scalegate.plan.option_types import output_dir

# One launch per case per round: relaunches would put consecutive launches back into the baseline.
ROUND = ["--scaling-launches", "1", "--scaling-max-launches", "1", "--scaling-confirm", "0"]


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
        f"--scaling-results-dir={results_dir}",
    ]


@dataclass(frozen=True, kw_only=True)
class Recording:
    """The one side of a recording's rounds (gate/sides.py ``RoundSide``): the working tree, one launch of each case
    a round (``round_argv``)."""

    project: Project
    name: str = "head"

    @property
    def tree(self) -> Path:
        return self.project.root

    def command(self, args: Sequence[str], where: Path, paired: Sequence[str] = ()) -> list[str]:
        return [*round_argv([*args, *paired], where, self.project), *older_plugin(self.tree)]

    def environment(self) -> dict[str, str]:
        return environment(self.tree)


def run_rounds(count: int, user_args: list[str], results_dir: Path) -> list[Path]:
    """Run the selection ``count`` times, as the gate runs its rounds; the run directory of every round."""

    def every_case(merged: Merged) -> list[str]:  # a recording runs all its rounds of every case
        return [f"[{c['case_id']}]" for c in merged["head"]]

    print(f"record-baselines: {count} rounds of the selection", flush=True)
    each = rounds.Rounds(
        sides=[Recording(project=Project.find())],
        args=user_args,
        gate_dir=results_dir,
        undecided=every_case,
        budgets=merge.Budgets(count),
        sessions=Sessions(),
        progress=rounds.counted("record-baselines", count),
    )
    return rounds.run(each).runs["head"]


def main(args: argparse.Namespace, extra: list[str]) -> int:
    from scalegate.record import update
    from scalegate.record.merge import merged_runs

    user_args = forward.passed_on(args, extra)
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
    r.add_argument(
        "--results-dir",
        default="results",
        type=output_dir("--results-dir"),
        help="the rounds go under RESULTS_DIR/record-<time>/",
    )
    r.add_argument("--baseline-dir", default=baseline_dir, type=output_dir("--baseline-dir"))
    declare.declare(r.add_argument, (Recorded,), prefix="")  # checked before the first round, not after the last
    forward.add(r)
    r.set_defaults(handler=main)
