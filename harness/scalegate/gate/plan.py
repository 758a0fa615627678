"""What a gate will do, decided before anything runs: its sides, its pairing, its budget, its deadline, its nodes.

``GatePlan.build`` checks the gate's own arguments and the ``--scaling-*`` options the user named (the gate reads
them from the same declarations pytest does: plan/option_groups.py), so a bad value stops the gate before its first
session. The settings the gate gives every session come from here; the user's own arguments come last and win.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalegate import policy
from scalegate.contract import sections
from scalegate.contract.errors import ScalegateError
from scalegate.gate import merge
from scalegate.gate.project import Project
from scalegate.plan import cluster

PAIRINGS = ("auto", *sections.PAIRINGS)  # --pairing: auto pairs in a duet, alternating where a case would not fit


@dataclass(frozen=True, kw_only=True)
class GatePlan:
    project: Project
    user_args: list[str]  # what goes on to every session: the user's pytest and --scaling-* arguments, as given
    results_dir: Path
    gate_dir: Path  # this gate's run: its rounds, its merged cases, the base tree
    base: str | None  # A/B: the base commit's ref (None with --base-python alone: the working tree on both sides)
    base_python: str | None  # A/B: the base side's interpreter
    pairing: str  # auto, duet, alternate, swap or rounds (``PAIRINGS``): how an A/B gate's two sides share the host
    turn_steps: int  # a duet's turn after a job's setup, in optimizer steps (--turn-steps)
    tolerance: float  # the efficiency drop to catch
    budget: int  # rounds a case may take
    script_budget: int | None  # a training script's rounds in a paired gate (None: as ``budget``)
    alternate_budget: int  # the rounds of a case whose two jobs alternate whole (the alternate pairing)
    deadline: float | None  # time.monotonic() past which no round ends (--max-minutes)
    baseline_dir: Path
    nodes: cluster.SlurmEnv | None  # a multi-node allocation: one gate process per node, node 0 judges
    markdown: str | None = None
    json: str | None = None

    @property
    def ab(self) -> bool:
        return bool(self.base or self.base_python)

    @property
    def node(self) -> int:
        return self.nodes.node_id if self.nodes is not None else 0

    def budgets(self, paired: bool) -> merge.Budgets:
        """The rounds each case may take: a training script's and an alternating case's own only in a paired gate."""
        if not paired:
            return merge.Budgets(self.budget)
        return merge.Budgets(self.budget, script=self.script_budget, alternate=self.alternate_budget)

    @property
    def settings(self) -> tuple[str, ...]:
        """What the gate sets in every session before the user's arguments: the drop to catch, and a baseline for the
        stored gate. A round's session launches each case once (gate/sides.py); a session that relaunches its cases
        itself takes ``relaunching``."""
        common = ("--scaling-tolerance", str(self.tolerance))
        return common if self.ab else ("--scaling-require-baseline", *common)

    @property
    def relaunching(self) -> tuple[str, ...]:
        """The settings of a session that relaunches a case while it is undecided (parity; the stored gate on several
        nodes, one session): the gate's, and its budget."""
        return (*self.settings, "--scaling-max-launches", str(self.budget))

    @classmethod
    def build(cls, args: argparse.Namespace, project: Project) -> "GatePlan":
        """``args``: the gate's command line (cli/gate.py); the --scaling-* options the user named are attributes
        of it under their pytest names, the others absent."""
        named: dict[str, Any] = vars(args)
        ab = bool(args.base or args.base_python)
        if args.pairing != "auto" and not ab:
            raise ScalegateError(
                f"--pairing {args.pairing} pairs an A/B gate's two sides, and this gate has one",
                "add --base REF (or --base-python PATH), or drop --pairing",
            )
        _check_turn_steps(args.turn_steps, args.pairing, ab)
        budget = named.get("scaling_max_launches", policy.GATE_MAX_LAUNCHES)
        default_tolerance = policy.AB_GATE_TOLERANCE if ab else policy.STORED_GATE_TOLERANCE
        nodes = cluster.detect()
        nodes = nodes if nodes is not None and nodes.nnodes > 1 else None
        if nodes is not None and not ab and args.max_minutes is not None:
            raise ScalegateError(
                "--max-minutes stops the gate between rounds; the stored-baseline gate on several nodes relaunches "
                "inside one pytest session, so it has no round to stop before",
                "bound the job with sbatch --time instead, or gate against the base commit (--base REF)",
            )
        return cls(
            project=project,
            user_args=list(args.forward),
            results_dir=Path(args.results_dir),
            gate_dir=(Path(args.results_dir) / _run_name(nodes)).resolve(),
            base=args.base,
            base_python=args.base_python,
            pairing=args.pairing,
            turn_steps=args.turn_steps or (policy.SWAP_TURN_STEPS if args.pairing == "swap" else 1),
            tolerance=named["scaling_tolerance"] if "scaling_tolerance" in named else default_tolerance,
            budget=budget,
            script_budget=budget if "scaling_max_launches" in named else min(budget, policy.SCRIPT_ROUNDS),
            alternate_budget=budget if "scaling_max_launches" in named else policy.ALTERNATE_ROUNDS,
            deadline=_deadline(args.max_minutes),
            baseline_dir=Path(named.get("scaling_baseline_dir") or project.baselines),
            nodes=nodes,
            markdown=args.markdown,
            json=args.json,
        )


def _check_turn_steps(steps: int | None, pairing: str, ab: bool) -> None:
    """``--turn-steps``: a whole number of steps, for a gate whose sides take turns step by step (None: not named)."""
    if steps is None:
        return
    if steps < 1:
        raise ScalegateError(
            f"--turn-steps {steps}: a turn runs at least one optimizer step",
            "name the steps of a turn (e.g. --turn-steps 10), or leave the option out for one step a turn",
        )
    if steps > 1 and (not ab or pairing in ("alternate", "rounds")):
        what = "this gate has one side" if not ab else f"--pairing {pairing} takes no turns of steps"
        raise ScalegateError(
            f"--turn-steps {steps} sets the length of a duet's turns, and {what}",
            "use it with --base REF and --pairing auto, duet or swap, or drop --turn-steps",
        )


def _run_name(nodes: cluster.SlurmEnv | None) -> str:
    """The gate's run directory's name: the same on every node of an allocation (its job and step), else the time."""
    if nodes is not None:
        return f"gate-{nodes.run_id}"
    return time.strftime("gate-%Y%m%d-%H%M%S")


def _deadline(minutes: float | None) -> float | None:
    """``--max-minutes``: the ``time.monotonic()`` past which no round of the gate ends (gate/rounds.py)."""
    if minutes is None:
        return None
    if not minutes > 0:
        raise ScalegateError(
            f"--max-minutes {minutes:g}: the gate's time budget must be more than 0 minutes",
            "name the minutes a gate may take (e.g. --max-minutes 10), or leave the option out",
        )
    return time.monotonic() + 60 * minutes
