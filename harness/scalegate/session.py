"""One pytest session's scaling state: the options, this host, the references, the run directory.

``ScalingSession.run`` is the whole life of a case: launch, correctness checks, a ``CaseRecord`` of the
launches, the verdict of ``scalegate.judge.judge`` against the baseline (launching again while the judge
says more launches could decide), and the result file that carries the record, so ``compare`` reaches
the same verdict from it.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalegate import launch, policy, workloads
from scalegate.checks import agreement, sharding
from scalegate.checks import script as script_checks
from scalegate.contract import atomic
from scalegate.contract.errors import LaunchError, ScalegateError
from scalegate.contract.faults import Faults
from scalegate.contract.results import CaseResult
from scalegate.contract.script import needed_steps
from scalegate.contract.spec import CaseSpec
from scalegate.contract.topology import Topology
from scalegate.figures import peaks, resources, stragglers
from scalegate.judge import LOCAL, CaseRecord, Conduct, Outcome, Overrides, judge
from scalegate.judge import metric as V
from scalegate.judge.evidence import from_results
from scalegate.launch import slurm, slurm_launches, warm
from scalegate.plan import cluster, declare, probe
from scalegate.plan.hostinfo import HostInfo, commit, versions
from scalegate.plan.matrix import Case
from scalegate.plan.options import Options
from scalegate.record import baselines
from scalegate.report import tensorboard


def run_id() -> str:
    """Shared by pytest-xdist workers (they inherit the controller's environment)."""
    agent = cluster.detect()
    if agent is not None:  # every node of the allocation must name the same run
        os.environ["SCALEGATE_RUN_ID"] = agent.run_id
    if not os.environ.get("SCALEGATE_RUN_ID"):
        os.environ["SCALEGATE_RUN_ID"] = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    return os.environ["SCALEGATE_RUN_ID"]


@dataclass
class ScalingSession:
    options: Options
    host: HostInfo
    run_dir: Path
    baseline: baselines.BaselineFile | None
    references: dict[tuple, list[CaseResult] | LaunchError] = field(default_factory=dict)
    slurm: cluster.SlurmEnv | None = field(default_factory=cluster.detect)  # agent mode under srun
    agents: warm.AgentPool | None = None  # --scaling-launcher warm: the session's warm torchrun agent
    started: dict[str, int] = field(default_factory=dict)  # node 0: each multi-node case's launches begun

    @property
    def profile(self) -> str:
        return self.host.profile

    def reference_spec(self, spec: CaseSpec) -> CaseSpec:
        """The single-process 1x1 case this one's speedup is measured against; for a training script, the same
        script with the same strategy word on one process (harness/scalegate/plan/script.py says why)."""
        steps = self.options.reference_steps(spec.script is not None, spec.run.steps)
        run = dataclasses.replace(spec.run, steps=steps)
        if spec.script is not None:
            one, needed = Topology.parse("1x1"), needed_steps(steps, spec.run.warmup)
            script = dataclasses.replace(spec.script, needed_steps=needed).at(spec.strategy, one)
            return spec.replace(topology="1x1", run=run, faults=Faults(), script=script)
        return spec.replace(strategy="single", topology="1x1", run=run, faults=Faults())

    def reference(self, spec: CaseSpec, more: int = 0) -> list[CaseResult]:
        """The single-process 1x1 launches of the same model and preset, measured in this session
        (``Options.reference_launches``; plus ``more`` fresh ones when a regression is confirmed)."""
        ref_spec = self.reference_spec(spec)
        key = (ref_spec.model, ref_spec.preset, ref_spec.scaling, ref_spec.global_batch, ref_spec.script)
        if key not in self.references:
            try:
                n = self.options.reference_launches(ref_spec.script is not None)
                self.references[key] = self._launches(ref_spec, n)
            except LaunchError as exc:
                self.references[key] = exc
        found = self.references[key]
        if isinstance(found, LaunchError):
            raise LaunchError(
                f"the reference {ref_spec.case_id} failed, so no speedup can be computed:\n{found.message}", found.hint
            )
        if more:
            found.extend(self._launches(ref_spec, more))
        return list(found)

    def _launches(self, spec: CaseSpec, n: int) -> list[CaseResult]:
        return [self._launch(spec) for _ in range(n)]

    def _profiled(self, spec: CaseSpec) -> CaseSpec:
        """``--scaling-profile``: the workers profile a few steps after the measured ones, into the case's
        directory (a relaunch of the case replaces its traces); unchanged when the option is off."""
        if not self.options.profile_steps:
            return spec
        profile_dir = str((self.run_dir / spec.case_id / "profile").resolve())
        return spec.replace(
            windows=dataclasses.replace(spec.windows, profile_steps=self.options.profile_steps, profile_dir=profile_dir)
        )

    def _windows(self, spec: CaseSpec) -> CaseSpec:
        """Where the post-measurement windows write: ``--scaling-profile``'s traces and ``--scaling-checkpoint``'s
        files go into the case's directory (a relaunch replaces them); unchanged when both are off."""
        spec = self._profiled(spec)
        if not spec.windows.checkpoint:
            return spec
        checkpoint_dir = str((self.run_dir / spec.case_id / "checkpoint").resolve())
        return spec.replace(windows=dataclasses.replace(spec.windows, checkpoint_dir=checkpoint_dir))

    def _launch(self, spec: CaseSpec) -> CaseResult:
        """One launch, by the launcher ``launch.choose`` names: a SLURM node's agent for a multi-node case under
        srun (node 0's: the others go through ``_run_other_node``), emulated nodes elsewhere, and for a
        single-node case the ``--scaling-launcher`` one, also under srun."""
        spec = probe.prepare(self._windows(spec), self.options.launching.data_dir)  # the output check, zero gradients
        name = launch.choose(spec, self.slurm, self.options.launching.launcher)
        if self._leads(spec):  # the other nodes join it
            self.started[spec.case_id] = self.started.get(spec.case_id, 0) + 1
            slurm_launches.announce(self.run_dir / spec.case_id, self.started[spec.case_id])
        settings = launch.Settings(
            data_dir=self.options.launching.data_dir,
            link_rate=self.options.launching.link_rate,
            agents=self.agents,
            slurm=self.slurm,
        )
        return launch.get(name)(settings).run(spec, self.run_dir / spec.case_id)  # type: ignore[return-value]

    def _run_other_node(self, case: Case) -> Outcome:
        """Nodes 1.. of a SLURM allocation run their agent; node 0 judges, writes and records."""
        spec, node = case.spec, self.slurm.node_id  # type: ignore[union-attr]
        key = baselines.case_key(spec.case_id, spec.preset, spec.execution.compile)
        if node >= spec.topo.nodes:
            return Outcome(
                case_id=spec.case_id,
                key=key,
                status=V.NOT_MEANINGFUL,
                message=f"node {node} has no part in a {spec.topo.nodes}-node case; node 0 reports it",
            )
        try:  # a multi-node case (node 1.. has a part): its agent joins each launch node 0 starts
            slurm_launches.follow(self.run_dir / spec.case_id, lambda: self._launch(spec), slurm.WAIT_S)
        except ScalegateError as exc:
            return Outcome(case_id=spec.case_id, key=key, status=V.FAILED, message=str(exc))
        return Outcome(
            case_id=spec.case_id,
            key=key,
            status=V.NOT_MEANINGFUL,
            message=f"node {node} ran its agent; node 0 judges and records the case",
        )

    @property
    def overrides(self) -> Overrides:
        return Overrides(**declare.pick(Overrides, self.options.judging, self.options.baselines))

    def run(self, case: Case, tolerances: dict[str, float] | None = None) -> Outcome:
        """Launch, judge, and launch again while the judge says more launches could decide (sequential gate)."""
        if self.slurm is not None and self.slurm.node_id > 0:
            return self._run_other_node(case)
        try:
            return self._run(case, tolerances)
        finally:
            if self._leads(case.spec):  # the other nodes' agents stop following the case's launches
                slurm_launches.announce(self.run_dir / case.spec.case_id, self.started.get(case.spec.case_id, 0), True)

    def _leads(self, spec: CaseSpec) -> bool:
        """Node 0 of an srun step, on a case whose launches the other nodes join."""
        return self.slurm is not None and self.slurm.node_id == 0 and spec.topo.multi_node

    def _run(self, case: Case, tolerances: dict[str, float] | None) -> Outcome:
        spec = case.spec
        key = baselines.case_key(spec.case_id, spec.preset, spec.execution.compile)
        tolerances = dict(tolerances or {})
        try:
            if spec == self.reference_spec(spec) and not spec.faults.any:
                results = self.reference(spec)
            else:
                results = self._launches(spec, self.options.case_launches(spec.script is not None))
            references = self.reference(spec)
        except ScalegateError as exc:
            record = self._record(case, key, [], [], tolerances, failure=str(exc))
            outcome = judge(record, self.baseline, self.overrides)
            self._write(outcome, record, spec)
            return outcome
        while True:
            record = self._record(case, key, results, references, tolerances)
            outcome = judge(record, self.baseline, self.overrides)
            if not outcome.next_launches:
                break
            if outcome.needs_reference:  # the classic gate confirms a regression: not in the same slow phase
                time.sleep(policy.CONFIRM_PAUSE_S)
            try:
                results = results + self._launches(spec, outcome.next_launches)
                if outcome.needs_reference:
                    references = self.reference(spec, more=outcome.next_launches)
            except ScalegateError as exc:  # the verdict so far stands, with the reason it could not go on
                outcome = dataclasses.replace(outcome, message=f"{outcome.message}\n(a further launch failed: {exc})")
                break
        chosen = _median_launch(results, outcome)
        late = stragglers.attribute(chosen) or {}
        message = (
            f"{outcome.message}\n{late['message']}" if late.get("message") else outcome.message
        )  # named in the verdict
        outcome = dataclasses.replace(
            outcome, result=chosen, resources=resources.summary(chosen), stragglers=late, message=message
        )
        self._write(outcome, record, spec)
        return outcome

    def _record(
        self,
        case: Case,
        key: str,
        results: list[CaseResult],
        references: list[CaseResult],
        tolerances: dict[str, float],
        failure: str = "",
    ) -> CaseRecord:
        """The judge's input: every launch as numbers, correctness problems (no baseline needed), how it ran."""
        spec = case.spec
        problems, notes = _problems(spec, results, references)
        opts = self.options
        fields = dict(
            problems=problems,
            failure=failure,
            oversubscribed=case.oversubscribed,
            oversubscribed_why=(
                f"{spec.topology} oversubscribes {self.host.cpu_cores} cores at {spec.run.cpu_threads} "
                f"thread(s) per rank: timing is not judged"
            )
            if case.oversubscribed
            else "",
            tolerances=tolerances,
            note="; ".join([*notes, *dict.fromkeys(r.launch["note"] for r in results if r.launch.get("note"))]),
            host=self.host.host_id,
            **self._peak(spec),
            reference_itself=spec == self.reference_spec(spec),
            conduct=Conduct(**declare.pick(Conduct, opts.judging, opts.sequential, launches=opts.launches)),
        )
        if not results:
            return CaseRecord(
                case_id=spec.case_id,
                key=key,
                profile=self.profile,
                world_size=spec.world_size,
                global_batch=spec.global_batch_size,
                steps=spec.run.steps,
                warmup=spec.run.warmup,
                **fields,
            )
        return from_results(results, references, key=key, profile=self.profile, **fields)

    def _peak(self, spec: CaseSpec) -> dict[str, Any]:
        """One rank's device peak at the case's dtype (harness/scalegate/figures/peaks.py): the GPU table, or measured on CPU once
        per session (between cases, when nothing else of the session runs)."""
        device = "cuda" if spec.device == "cuda" or (spec.device == "auto" and self.host.device == "cuda") else "cpu"
        found = peaks.peak_for(device, self.host.device_name, spec.run.dtype, spec.run.cpu_threads)
        return {"peak_flops": found.flops, "peak_source": found.source}

    def _write(self, outcome: Outcome, record: CaseRecord, spec: CaseSpec) -> None:
        data: dict[str, Any] = {k: v for k, v in dataclasses.asdict(outcome).items() if k != "result"}
        data.update(
            spec=spec.to_dict(),
            profile=self.profile,
            host=self.host.hostname,
            host_id=self.host.host_id,
            commit=commit(),
            fingerprint=self.host.fingerprint(),
            versions=dict(versions(self.host)),  # what the history draws a software change from (docs/history.md)
            written=time.time(),
            record=record.to_dict(),
            result=outcome.result.to_dict() if outcome.result else None,
        )
        traces = [
            r.extra["profile_trace"]
            for r in (outcome.result.ranks if outcome.result else ())
            if r.extra.get("profile_trace")
        ]
        if traces:  # --scaling-profile: one Chrome trace per rank (harness/scalegate/measure/profiling.py)
            data["traces"] = traces
        if outcome.result is not None and outcome.result.spec.zero_grad:  # what agreement left out, and why
            data["zero_grad"] = outcome.result.spec.zero_grad
        atomic.write_json(self.run_dir / f"{spec.case_id}.json", data)
        if self.options.output.tensorboard is not None:
            tensorboard.write_case(self.options.output.tensorboard / self.run_dir.name, outcome)


def _median_launch(results: list[CaseResult], outcome: Outcome) -> CaseResult:
    """The launch whose efficiency (the one the verdict was decided on) is the median of the launches'."""
    values = outcome.launch_local_efficiencies if outcome.gate == LOCAL else outcome.launch_efficiencies
    if len(values) != len(results) or len(results) == 1:
        return results[(len(results) - 1) // 2]
    return results[sorted(range(len(results)), key=lambda i: values[i])[(len(results) - 1) // 2]]


def _problems(
    spec: CaseSpec, results: list[CaseResult], references: list[CaseResult]
) -> tuple[tuple[str, ...], list[str]]:
    """Correctness problems of every launch (no baseline needed), each must train correctly; and notes on what
    could not be checked. A training script is checked by its loss (harness/scalegate/checks/script.py)."""
    if spec.script is not None:
        found, notes = [], []
        for r in results:
            more, said = script_checks.problems(r, references[0] if references else None)
            found += more
            notes += said
        for r in [*results, *references]:  # the 1x1 reference's steps make the efficiency too
            found += script_checks.measurement(r)
        return tuple(dict.fromkeys(found)), list(dict.fromkeys(notes))
    cls = workloads.resolve(spec)  # the workload's bar: its preset's, else its default (fixtures/base.py)
    fraction = workloads.convergence_fraction(cls, workloads.preset_of(cls, spec.preset))
    found = (
        p
        for r in results
        for p in (
            agreement.agreement(r),
            agreement.loss_curve(r),
            agreement.convergence(r, fraction),
            sharding.check(r),
            agreement.checkpoint(r),
            agreement.compiled(r),
        )
        if p
    )
    return tuple(dict.fromkeys(found)), []
