"""``python -m scalegate gate [--base REF] [pytest args]``: the pull-request gate in one command.

    python -m scalegate gate --base origin/main              # the PR against its base commit, measured in this job
    python -m scalegate gate --base origin/main --scaling-steps 300   # a team's script, as its figures were taken
    python -m scalegate gate --base origin/main -k "ddp and 1x2" --markdown gate.md --json gate.json
    python -m scalegate gate                                 # against the committed baselines (dedicated hardware)
    srun --ntasks-per-node=1 python -m scalegate gate --base origin/main -k "2x1"    # across the allocation's nodes

It runs, in the repository it is called from, that repository's scaling cases: its declared canaries when nothing
is named (gate/project.py). With ``--base`` the working tree is judged against the base commit, both launched in
every round and paired in time (docs/duet.md); without it, against the stored baselines. A case undecided after a
round runs again, up to the gate's budget; the table, its notes and its cost are printed, and written where asked.
Arguments after the gate's own options go to pytest and win over the gate's settings.

How often it catches what (docs/detection.md) holds at the settings those figures were measured with: the
canaries at the defaults below, a team's training script at --scaling-steps 300 (the steps `scalegate init` writes
into a team's CI files), both at the default 5% tolerance and round budget.

Exit codes: 0 no regression, 1 a regression or a failed case, 2 bad input or nothing to judge, 128+N stopped by
signal N (its sessions, ranks and base worktree removed). What the gate promises: docs/gate.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scalegate.cli import forward
from scalegate.contract import atomic
from scalegate.contract.errors import ScalegateError
from scalegate.gate import project
from scalegate.gate.life import Gate, Stopped
from scalegate.gate.plan import PAIRINGS, GatePlan
from scalegate.gate.verdict import EXIT_BAD_INPUT
from scalegate.plan.option_types import output_dir, output_file


def main(args: argparse.Namespace, extra: list[str]) -> int:
    """The gate, from its parsed command line; ``extra``: pytest's own arguments, passed on."""
    args.forward = forward.passed_on(args, extra)
    gate: Gate | None = None
    try:
        gate = Gate(GatePlan.build(args, project.Project.find()))
        found = gate.run()
    except ScalegateError as exc:
        print(f"error: {exc.message}" + (f"\nHINT: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return EXIT_BAD_INPUT
    except Stopped as stop:
        where = f" in round {gate.round_now}" if gate is not None and gate.round_now else ""
        print(f"gate: stopped by {stop}{where}; its sessions, ranks and base worktree were removed", file=sys.stderr)
        return 128 + stop.signum
    if found.follower:
        return found.code
    print(found.text, end="")
    if args.markdown:
        atomic.write_text(Path(args.markdown), found.text)
    if args.json:
        atomic.write_text(Path(args.json), json.dumps(found.data, indent=2) + "\n")
    return found.code


def add_parser(sub) -> None:
    g = sub.add_parser(
        "gate",
        help="the PR gate: run the repository's canary cases, judge against the base commit or the baselines",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
        usage="python -m scalegate gate [--base REF] [gate options] [--scaling-* options] [pytest args]",
    )
    g.add_argument(
        "--base",
        metavar="REF",
        help="A/B: also launch the cases on this commit (e.g. origin/main) in every round, and judge the working tree "
        "against it instead of the stored baselines",
    )
    g.add_argument(
        "--base-python",
        metavar="PATH",
        help="A/B across environments: the base side runs in this interpreter (another venv's bin/python), with "
        "--base REF or alone (the working tree on both sides): a dependency bump measured",
    )
    g.add_argument(
        "--pairing",
        choices=PAIRINGS,
        default="auto",
        help="A/B: how the two sides' jobs share the host: duet (step by step, both resident), alternate (whole jobs "
        "in turn, one resident), swap (turns of --turn-steps steps, 25 unless named, the idle job's training state "
        "swapped out between its turns), rounds (each side's session in turn); auto pairs in a duet and alternates a "
        "case whose two jobs would not fit in device memory (default: %(default)s)",
    )
    g.add_argument(
        "--turn-steps",
        type=int,
        default=None,
        metavar="K",
        help="A/B duet or swap: each of a job's turns runs K optimizer steps before its partner's turn, at most half "
        "the job's steps (its setup is one turn); longer turns hand over less often, the partner's steps further "
        "apart in time (default: 1, for the swap pairing 25)",
    )
    g.add_argument(
        "--max-minutes",
        type=float,
        metavar="M",
        help="a time budget: no round starts that would end past M minutes by the longest round so far; the cases "
        "still undecided are judged on the rounds they had (noisy), and the table says why (default: none)",
    )
    g.add_argument(
        "--results-dir",
        default="results/gate",
        type=output_dir("--results-dir"),
        help="where the gate's runs go (default: %(default)s)",
    )
    g.add_argument(
        "--markdown", type=output_file("--markdown"), help="also write the table to this file (a PR comment)"
    )
    g.add_argument("--json", type=output_file("--json"), help="also write the verdicts as JSON to this file")
    forward.add(g)
    g.set_defaults(handler=main)


def namespace(argv: list[str] | None = None, **given: object) -> tuple[argparse.Namespace, list[str]]:
    """The gate's arguments as its command line ``argv`` gives them, then ``given``; and what goes on to pytest. For
    a caller that runs the gate itself (bisect's steps), so an option added here is never missing there."""
    sub = argparse.ArgumentParser().add_subparsers()
    add_parser(sub)
    args, extra = sub.choices["gate"].parse_known_args(argv or [])
    vars(args).update(given)
    return args, extra
