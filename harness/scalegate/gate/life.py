"""The PR gate's life, top to bottom: plan, sides, parity, rounds, merge, judge, write.

    verdict = Gate(GatePlan.build(args, project)).run()     # cli/gate.py

One object holds a gate's state while it runs (as torchtitan's ``Trainer`` holds a training run's): the plan it was
given, the pytest sessions it has running (gate/sessions.py), the notes it takes, the round it is in. Every phase
below is a short block under a comment saying what it does. A gate stopped by a signal (``scancel``, a CI timeout,
Ctrl-C) ends its sessions, its coordinator and its base worktree on the way out and says so in one line
(``Stopped``).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from scalegate.contract import atomic
from scalegate.gate import environments, merge, nodes, pairing, rounds, verdict, worktree
from scalegate.gate.paired import Merged, Paired
from scalegate.gate.plan import GatePlan
from scalegate.gate.sessions import NoCases, Sessions, check_run
from scalegate.gate.sides import Side, pytest_argv
from scalegate.plan import hostinfo
from scalegate.record import baselines
from scalegate.report import compare
from scalegate.report import environments as env_report


class Stopped(BaseException):
    """A signal ended the gate: what it was stopped by, and where. A BaseException, so no ``except Exception`` on the
    way out takes it for a failure of its own; every ``with`` block it leaves cleans up."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True)
class Verdict:
    code: int  # 0 ok, 1 a regression or a failed case, 2 bad input
    text: str  # the markdown table
    data: dict[str, Any]
    node: int = 0  # the node that judged; another node's gate prints nothing (``follower``)
    follower: bool = False


@dataclass
class Gate:
    plan: GatePlan
    sessions: Sessions = field(default_factory=Sessions)  # its pytest sessions running now: a stopped gate ends them
    notes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    round_now: int = 0

    def run(self) -> Verdict:
        with _signals():
            try:
                if self.plan.ab:
                    return self._ab()
                if self.plan.nodes is not None:  # every node's agent takes part in each launch: one session
                    return self._stored_in_session()
                return self._stored_in_rounds()
            except Stopped:
                self.sessions.stop()  # their ranks, agents and namespaces go with them
                raise

    # --- against the stored baselines ----------------------------------------------------------------------------
    def _stored_in_rounds(self) -> Verdict:
        plan = self.plan
        # parity: both front ends in each launch, in a session of its own
        parity_run, parity_code = pairing.parity(plan, plan.project.root, plan.gate_dir, sessions=self.sessions)
        # the rounds: every undecided case once a round
        head = Side(name="head", tree=plan.project.root, project=plan.project, settings=plan.settings)
        found = self._rounds([head], parity_run, _stored_undecided(plan.baseline_dir))
        # merge, then judge against the stored baselines
        run_dir = merge.write(plan.gate_dir, found.merged["head"], parity_run, plan.results_dir)
        return self._judged(run_dir, None, [*found.codes, parity_code])

    def _stored_in_session(self) -> Verdict:
        """One pytest session on every node; its sequential relaunches follow each other; node 0 judges."""
        plan, project = self.plan, self.plan.project
        argv = pytest_argv(
            project,
            python=sys.executable,
            tests=[*project.tests, *project.parity],
            settings=plan.relaunching,
            results_dir=plan.gate_dir,
            user_args=plan.user_args,
        )
        code = self.sessions.run(argv, tree=project.root)
        if plan.node != 0:
            return Verdict(code=0 if code == 0 else 1, text="", data={}, node=plan.node, follower=True)
        return self._judged(check_run(code, plan.gate_dir, "the gate"), None, [code])

    # --- against the base commit, measured in the same job (A/B) -----------------------------------------------
    def _ab(self) -> Verdict:
        plan = self.plan
        # the environments: the base side may run another interpreter (a dependency bump)
        head_env = environments.head()
        base_env = environments.probe(plan.base_python, "base") if plan.base_python else head_env
        environments.check_same_device(base_env, head_env)
        head_env = {**head_env, "scalegate": hostinfo.commit(plan.project.root)}  # the code each side imports
        with contextlib.ExitStack() as held:  # whatever ends the gate, each is undone in the reverse order
            # the base tree: checked out beside the working tree on every node, at a path as long as its own, and
            # linked from the run directory; node 0 also removes what a killed node left on a shared filesystem
            if plan.nodes is not None and plan.node == 0:
                held.callback(worktree.remove_left, plan.project.root, plan.gate_dir)
            for left in worktree.sweep(plan.project.root) if plan.base else []:
                print(f"gate: removed {left}, a tree that a killed scalegate process left on this host", flush=True)
            link = plan.gate_dir / f"base-tree-node{plan.node}"
            base = held.enter_context(worktree.base_tree(plan.project.root, plan.base, link))
            if base.note:
                print(f"gate: {base.note}", flush=True)
                self.notes.append(base.note)
            base_env = {**base_env, "scalegate": hostinfo.commit(base.path)}
            sides = self._sides(base.path, base_env["python"])
            chosen = pairing.choose(plan, base.path, base_env["python"])
            print(
                f"gate: A/B, {plan.project.root} against {base.ref} ({base.commit[:12]}, checked out at {base.path}): "
                f"{chosen.says}",
                flush=True,
            )
            # parity: both front ends in each launch, no base needed (node 0: the other nodes have no part in it)
            parity_run, parity_code = pairing.parity(plan, plan.project.root, plan.gate_dir, sessions=self.sessions)
            # the rounds: both sides once a round, paired where they can be; the other nodes follow node 0
            paired = held.enter_context(pairing.coordinator(plan, chosen))
            followers = held.enter_context(nodes.lead(plan, paired))
            if plan.node != 0:
                return self._followed(sides, paired)
            found = self._rounds(sides, parity_run, _ab_undecided(plan.baseline_dir), paired, followers)
            duet = pairing.report(chosen, paired)
        # merge: every round's launches of a case as one record, the base side's beside them
        run_dir = merge.write(
            plan.gate_dir,
            found.merged["head"],
            parity_run,
            plan.results_dir,
            base_cases=found.merged["base"],
            base={"ref": base.ref, "commit": base.commit},
        )
        atomic.write_json(run_dir / verdict.DUET_FILE, duet)
        atomic.write_json(run_dir / env_report.FILE, head_env)
        atomic.write_json(run_dir / "base" / env_report.FILE, base_env)
        # judge: the one judge, the head against the base measured in the same rounds
        return self._judged(run_dir, run_dir / "base", [*found.codes, parity_code])

    def _sides(self, base_tree: Path, base_python: str) -> list[Side]:
        plan = self.plan
        empty = plan.gate_dir / "no-baselines"
        return [
            # the base side's ranks build DeepSpeed's ops into their own venv's cache (launch/base.py)
            Side(
                name="base",
                tree=base_tree,
                project=plan.project,
                python=base_python,
                settings=plan.settings,
                baselines=empty,
                drop=("TORCH_EXTENSIONS_DIR",) if base_python != sys.executable else (),
            ),
            Side(name="head", tree=plan.project.root, project=plan.project, settings=plan.settings, baselines=empty),
        ]

    def _followed(self, sides: list[Side], paired: Paired | None) -> Verdict:
        """A node other than 0: run each round node 0 names, on this node, until node 0 ends the gate."""
        code = nodes.follow(self.plan, sides, paired, self.sessions, on_round=self._at_round)
        return Verdict(code=code, text="", data={}, node=self.plan.node, follower=True)

    # --- the phases every gate shares ----------------------------------------------------------------------------
    def _at_round(self, n: int) -> None:
        self.round_now = n

    def _rounds(self, sides, parity_run, undecided, paired=None, followers=None) -> rounds.Outcome:
        plan = self.plan
        each = rounds.Rounds(
            sides=sides,
            args=plan.user_args,
            gate_dir=plan.gate_dir,
            undecided=undecided,
            budgets=plan.budgets(paired=paired is not None),
            sessions=self.sessions,
            paired=paired,
            followers=followers,
            deadline=plan.deadline,
            on_round=self._at_round,
        )
        try:
            found = rounds.run(each)
        except NoCases:
            if parity_run is None:
                raise
            return rounds.Outcome(merged={side.name: [] for side in sides}, codes=(), runs={})  # parity only
        self.notes += found.notes
        return found

    def _judged(self, run_dir: Path, base_dir: Path | None, codes: list[int]) -> Verdict:
        """The one judge on the merged run, the gate's notes and cost beside it; a pytest failure the table does
        not show (a crash) fails the gate too."""
        if self.notes:
            atomic.write_json(run_dir / verdict.NOTES_FILE, self.notes)
        atomic.write_json(run_dir / verdict.COST_FILE, _cost(self.plan, time.monotonic() - self.started))
        code, text, data = verdict.judge(run_dir, self.plan.baseline_dir, base_dir)
        if 1 in codes and code == verdict.EXIT_OK:
            code = verdict.EXIT_REGRESSION
        return Verdict(code=code, text=text, data=data)


def _stored_undecided(baseline_dir: Path):
    def undecided(merged: Merged) -> list[str]:
        cases = merged["head"]
        baseline = baselines.load(baseline_dir, cases[0].get("profile", "?")) if cases else None
        return [f"[{c['case_id']}]" for c in cases if compare.outcome_of(c, baseline).next_launches]

    return undecided


def _ab_undecided(baseline_dir: Path):
    def undecided(merged: Merged) -> list[str]:
        cases = merged["head"]
        stored = baselines.load(baseline_dir, cases[0].get("profile", "?")) if cases else None
        theirs = compare.base_records(cases, merged["base"])
        return [
            f"[{c['case_id']}]" for c in cases if compare.outcome_of(c, stored, base=theirs[c["key"]]).next_launches
        ]

    return undecided


def _cost(plan: GatePlan, wall_s: float) -> dict[str, Any]:
    """What the gate cost: its wall, and nodes x devices per node x wall (GPUs, or the CPU cores a node gives)."""
    host, nodes = hostinfo.detect(), plan.nodes
    count = nodes.nnodes if nodes is not None else 1
    devices = host.devices_per_node  # a node's GPUs, or its usable cores; an allocation's own where it says
    if nodes is not None:
        devices = (nodes.gpus_on_node if host.device == "cuda" else nodes.cpus_on_node) or devices
    return {
        "wall_s": round(wall_s, 1),
        "nodes": count,
        "devices": devices,
        "device": "GPUs" if host.device == "cuda" else "CPU cores",
        "device_minutes": round(count * devices * wall_s / 60, 2),
    }


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    """SIGTERM (scancel, a CI timeout) and SIGINT (Ctrl-C) stop the gate as an exception, so every block it is in
    cleans up; the handlers before are put back after."""

    def stop(signum: int, frame: Any) -> None:
        raise Stopped(signum)

    before = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
