"""How an A/B gate's two sides share the host, and the parity session that needs no base.

Four pairings (docs/duet.md):

- **duet**: both sides' jobs of a case resident at once, taking turns one optimizer step at a time;
- **swap**: the duet's turns, K steps long, with the idle job's training state out of device memory between its turns
  (measure/swap.py): forced by ``--pairing swap``;
- **alternate**: one resident job at a time, the two sides' jobs of a case in ABBA order, each whole, back to back
  (a job that fills the GPU cannot be resident twice); a case whose two jobs would not fit in device memory
  alternates inside a duet gate;
- **rounds**: each round runs the base's session, then the head's (a base that speaks no pairing, or ``--pairing
  rounds``).

``choose`` decides before the first round and says why; ``coordinator`` starts the pairing's coordinator (a unix
socket on one node, ``local``; tcp on node 0 of an allocation) and says how the sessions pair (gate/paired.py).
"""

from __future__ import annotations

import contextlib
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from scalegate.contract import duet
from scalegate.contract.errors import ScalegateError
from scalegate.contract.nvml import NvmlDeviceError
from scalegate.gate.paired import Merged, Paired, none_refused
from scalegate.gate.plan import GatePlan
from scalegate.gate.sessions import NO_CASES, Sessions, check_run
from scalegate.gate.sides import pytest_argv, unpaired_base
from scalegate.launch import duet_fit
from scalegate.launch.duet import Coordinator
from scalegate.plan import hostinfo
from scalegate.record import baselines

PORT_BASE, PORT_SPAN = 28000, 4000  # node 0's coordinator: below Linux's ephemeral range, apart from rendezvous'


@dataclass(frozen=True)
class Chosen:
    pairing: str  # duet, swap, alternate or rounds
    why: str  # why not paired (rounds), or ""
    turn_steps: int = 1  # a duet's turn, in steps

    @property
    def says(self) -> str:
        return {
            "duet": f"duet: both commits' jobs of a case take turns {duet.turn_length(self.turn_steps)}",
            "swap": f"swap: both commits' jobs of a case take turns {duet.turn_length(self.turn_steps)}, the idle "
            "job's training state swapped out between its turns",
            "alternate": "alternate: both commits' jobs of a case take turns one whole job at a time, one resident",
            "rounds": f"not paired ({self.why}): each round runs the base's session, then the head's",
        }[self.pairing]


def choose(plan: GatePlan, base_tree: Path, base_python: str) -> Chosen:
    """The pairing ``--pairing`` asks for (auto: the duet), where the base side's ranks can pair."""
    if plan.pairing == "rounds":
        return Chosen("rounds", "--pairing rounds")
    why = unpaired_base(base_tree, base_python)
    if why and plan.pairing != "auto":
        raise ScalegateError(
            f"--pairing {plan.pairing}: {why}",
            "gate against a base whose scalegate speaks this pairing, or pass --pairing rounds (or leave it auto)",
        )
    if why:
        return Chosen("rounds", why)
    if plan.pairing == "alternate":
        return Chosen("alternate", "")
    return Chosen("swap" if plan.pairing == "swap" else "duet", "", turn_steps=plan.turn_steps)


def address(plan: GatePlan) -> tuple[str, int]:
    """Node 0's coordinator on a multi-node allocation: (host, port), the same on every node (its job and step)."""
    slurm = plan.nodes
    assert slurm is not None
    return slurm.master, PORT_BASE + zlib.crc32(f"gate:{slurm.run_id}".encode()) % PORT_SPAN


@contextlib.contextmanager
def coordinator(plan: GatePlan, chosen: Chosen) -> Iterator[Paired | None]:
    """The chosen pairing's coordinator for the gate's rounds, closed however they end (None: not paired)."""
    if chosen.pairing == "rounds":
        yield None
        return
    refusals = _refusals(plan.baseline_dir) if chosen.pairing == "duet" else none_refused
    if plan.nodes is None:
        with local(chosen, refusals) as paired:
            yield paired
        return
    host, port = address(plan)
    if plan.node != 0:  # its gate and its ranks reach node 0's coordinator over tcp
        yield Paired(pairing=_sessions(chosen), address=f"tcp:{host}:{port}")
        return
    with Coordinator(**_turns(chosen), tcp=("0.0.0.0", port), host=host) as c:
        yield Paired(pairing=_sessions(chosen), address=c.address, coordinator=c, refusals=refusals)


@contextlib.contextmanager
def local(chosen: Chosen, refusals: Callable[[Merged], dict[str, str]] = none_refused) -> Iterator[Paired]:
    """The chosen pairing's coordinator on this one host (a unix socket), closed however its rounds end."""
    with Coordinator(**_turns(chosen)) as c:
        yield Paired(pairing=_sessions(chosen), address=c.address, coordinator=c, refusals=refusals)


def _turns(chosen: Chosen) -> dict[str, Any]:
    """What the coordinator grants in the chosen pairing."""
    return {
        "alternate": chosen.pairing == "alternate",
        "turn_steps": chosen.turn_steps,
        "swap": chosen.pairing == "swap",
    }


def _sessions(chosen: Chosen) -> str:
    """The sessions' pairing: a swap's sessions run as a duet's (the coordinator's ``go`` swaps)."""
    return "duet" if chosen.pairing == "swap" else chosen.pairing


def report(chosen: Chosen, paired: Paired | None) -> dict[str, Any]:
    """What duet.json holds: the pairing, or why none, every job's turns and the rounds' timeline (node 0's)."""
    if paired is None:
        return {"duet": False, "why_not": chosen.why, "pairing": "rounds", "jobs": {}}
    c = paired.coordinator
    assert isinstance(c, Coordinator)  # node 0's
    c.settle()  # every job's last bye read before its end is reported
    said = {"pairing": chosen.pairing, "turn_steps": chosen.turn_steps}
    return {"duet": True, "why_not": "", **said, "jobs": c.report(), **c.timeline()}


def _refusals(baseline_dir: Path):
    """{case id: why} for the cases whose two resident jobs would not fit in device memory this round
    (launch/duet_fit.py): their peaks from the rounds so far, else from the stored baseline. They alternate; so does
    every case with a recorded peak where the GPUs ``CUDA_VISIBLE_DEVICES`` names cannot be matched to NVML's."""

    def needs(merged: Merged) -> list[duet_fit.Need]:
        stored = baselines.load(baseline_dir, hostinfo.detect().profile)
        return duet_fit.needs(merged, stored.cases if stored else {})

    def refused(merged: Merged) -> dict[str, str]:
        try:
            free = duet_fit.free_bytes()
        except NvmlDeviceError as exc:  # which GPU is whose is unknown: no case is made resident twice on a guess
            return {need.case_id: f"GPU memory could not be read: {exc}" for need in needs(merged)}
        if free is None:
            return {}  # no GPU: nothing to check
        return duet_fit.refusals(needs(merged), free)

    return refused


def parity(plan: GatePlan, tree: Path, gate_dir: Path, *, sessions: Sessions) -> tuple[Path | None, int]:
    """Parity in a session of its own (both front ends interleaved in each launch: no base needed), where the
    repository has a parity test; node 0 alone runs it."""
    project = plan.project
    if not project.parity or plan.node != 0:
        return None, 0
    argv = pytest_argv(
        project,
        python=sys.executable,
        tests=project.parity,
        settings=plan.relaunching,
        results_dir=gate_dir / "parity",
        user_args=plan.user_args,
    )
    code = sessions.run(argv, tree=tree)
    if code == NO_CASES:  # the selection has no parity case
        return None, 0
    if code == 0 and not (gate_dir / "parity" / "latest").exists():
        # every parity case was skipped with its reason (one GPU: a 1x2 pair cannot run), so no case opened a run
        print("gate: parity: every parity case was skipped here (reasons above); the gate goes on without parity")
        return None, 0
    return check_run(code, gate_dir / "parity", "the gate's parity session"), code
