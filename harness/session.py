"""One pytest session's scaling state: the options, this host, the references, the run directory.

``ScalingSession.run`` is the whole life of a case: launch, correctness checks, speedup against the
single-process 1x1 reference measured in this session, verdict against the baseline, result file.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fixtures
from harness import atomic, baselines, checks, metrics, resources, sharding, stats, tensorboard
from harness.errors import LaunchError, ScalegateError
from harness.hostinfo import HostInfo, commit
from harness.launch import emulated, run_case, warm
from harness.launch import slurm as slurm_agent
from harness.matrix import Case
from harness.options import Options
from harness.results import CaseResult
from harness.spec import CaseSpec, Faults
from harness import verdict as V


@dataclass(frozen=True, kw_only=True)
class Outcome:
    case_id: str
    key: str
    status: str
    message: str
    result: CaseResult | None = None
    speedup: float | None = None
    efficiency: float | None = None
    noise_rel: float | None = None
    reference_throughput: float | None = None
    baseline_efficiency: float | None = None
    problems: tuple[str, ...] = ()
    oversubscribed: bool = False
    resources: dict[str, Any] = field(default_factory=dict)  # memory, state bytes, bytes on the wire
    efficiency_ci: tuple[float, float] | None = None  # bootstrap 95% interval (harness/stats.py)
    reference_step_times_s: tuple[float, ...] = ()  # so `python -m harness compare` can redo the interval
    tolerances: dict[str, float] = field(default_factory=dict)  # @pytest.mark.scaling_tolerance overrides
    launch_efficiencies: tuple[float, ...] = ()  # one per launch when several were judged together

    @property
    def failed(self) -> bool:
        return self.status in (V.REGRESSED, V.FAILED)


def run_id() -> str:
    """Shared by pytest-xdist workers (they inherit the controller's environment)."""
    agent = slurm_agent.detect()
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
    slurm: slurm_agent.SlurmEnv | None = field(default_factory=slurm_agent.detect)  # agent mode under srun
    agents: warm.AgentPool | None = None  # --scaling-launcher warm: the session's warm torchrun agent

    @property
    def profile(self) -> str:
        return self.host.profile

    def reference_spec(self, spec: CaseSpec) -> CaseSpec:
        return spec.replace(strategy="single", topology="1x1", faults=Faults())

    def reference(self, spec: CaseSpec, more: int = 0) -> list[CaseResult]:
        """The single-process 1x1 launches of the same model and preset, measured in this session
        (``--scaling-launches`` of them, plus ``more`` fresh ones when a regression is confirmed)."""
        ref_spec = self.reference_spec(spec)
        key = (ref_spec.model, ref_spec.preset, ref_spec.scaling, ref_spec.global_batch)
        if key not in self.references:
            try:
                self.references[key] = self._launches(ref_spec, self.options.launches)
            except LaunchError as exc:
                self.references[key] = exc
        found = self.references[key]
        if isinstance(found, LaunchError):
            raise LaunchError(f"the reference {ref_spec.case_id} failed, so no speedup can be computed:\n"
                              f"{found.message}", found.hint)
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
        return spec.replace(profile_steps=self.options.profile_steps,
                            profile_dir=str((self.run_dir / spec.case_id / "profile").resolve()))

    def _launch(self, spec: CaseSpec) -> CaseResult:
        spec = self._profiled(spec)
        case_dir = self.run_dir / spec.case_id
        if self.slurm is not None and spec.topo.multi_node:  # node 0's agent (others: _run_other_node)
            return slurm_agent.run_agent(spec, case_dir, self.slurm, data_dir=self.options.data_dir)  # type: ignore[return-value]
        if spec.topo.multi_node:
            return emulated.run_case(spec, case_dir, link_rate=self.options.link_rate, data_dir=self.options.data_dir)
        return run_case(spec, case_dir, data_dir=self.options.data_dir, agents=self.agents)  # single node, also under srun

    def _run_other_node(self, case: Case) -> Outcome:
        """Nodes 1.. of a SLURM allocation run their agent; node 0 judges, writes and records."""
        spec, node = case.spec, self.slurm.node_id  # type: ignore[union-attr]
        key = baselines.case_key(spec.case_id, spec.preset)
        if node >= spec.topo.nodes:
            return Outcome(case_id=spec.case_id, key=key, status=V.NOT_MEANINGFUL,
                           message=f"node {node} has no part in a {spec.topo.nodes}-node case; node 0 reports it")
        try:
            slurm_agent.run_agent(self._profiled(spec), self.run_dir / spec.case_id, self.slurm,  # type: ignore[arg-type]
                                  data_dir=self.options.data_dir)
        except ScalegateError as exc:
            return Outcome(case_id=spec.case_id, key=key, status=V.FAILED, message=str(exc))
        return Outcome(case_id=spec.case_id, key=key, status=V.NOT_MEANINGFUL,
                       message=f"node {node} ran its agent; node 0 judges and records the case")

    def run(self, case: Case, tolerances: dict[str, float] | None = None) -> Outcome:
        spec = case.spec
        key = baselines.case_key(spec.case_id, spec.preset)
        if self.slurm is not None and self.slurm.node_id > 0:
            return self._run_other_node(case)
        try:
            if spec.strategy == "single" and spec.topology == "1x1" and not spec.faults.any:
                results = self.reference(spec)
            else:
                results = self._launches(spec, self.options.launches)
            reference = self.reference(spec)
        except ScalegateError as exc:
            outcome = Outcome(case_id=spec.case_id, key=key, status=V.FAILED, message=str(exc))
            self._write(outcome, spec)
            return outcome
        outcome = self._judge(case, key, results, reference, tolerances or {})
        outcome = self._confirm(case, key, outcome, results, tolerances or {})
        note = outcome.result.launch.get("note") if outcome.result is not None else None
        if note:  # e.g. emulated nodes whose links could not be shaped: say so
            outcome = dataclasses.replace(outcome, message=f"{outcome.message} [{note}]")
        self._write(outcome, spec)
        return outcome

    def _confirm(self, case: Case, key: str, outcome: Outcome, results: list[CaseResult],
                 tolerances: dict[str, float]) -> Outcome:
        """A timing regression fails only if it holds with fresh launches of the case and its reference.

        Launch-to-launch spread on shared machines is several times one run's own noise band
        (docs/detection.md), so one slow launch is not a verdict: ``--scaling-launches`` more of each
        are measured and every launch so far is judged together. Memory and bytes are deterministic
        enough to need no confirmation, and are judged on the first launches.
        """
        first = outcome
        for attempt in range(self.options.confirm):
            if outcome.status != V.REGRESSED or outcome.result is None or resources.regressions(
                    outcome.result, self.baseline, key, f"{key} on {self.profile}"):
                break
            try:
                results = results + self._launches(case.spec, self.options.launches)
                reference = self.reference(case.spec, more=self.options.launches)
            except ScalegateError as exc:
                return dataclasses.replace(outcome, message=f"{outcome.message}\n(confirmation launch failed: {exc})")
            outcome = self._judge(case, key, results, reference, tolerances)
        if outcome is first:
            return outcome
        verb = "confirmed" if outcome.status == V.REGRESSED else "not confirmed"
        return dataclasses.replace(outcome, message=f"{outcome.message}\n(first: {first.message.splitlines()[0]}; "
                                                    f"regression {verb} by relaunching the case and its reference; "
                                                    f"{len(results)} launches judged together)")

    def _judge(self, case: Case, key: str, results: list[CaseResult], references: list[CaseResult],
               tolerances: dict[str, float] | None = None) -> Outcome:
        spec = case.spec
        reference = _pooled(references)  # the reference is steady (+-0.4% between launches): pool its steps
        estimates = [stats.efficiency_estimate(r.step_times_s, spec.global_batch_size, reference.step_times_s,
                                               reference.spec.global_batch_size, spec.world_size) for r in results]
        estimate = stats.pooled_estimate(estimates)
        result = results[sorted(range(len(results)), key=lambda i: estimates[i].value)[(len(results) - 1) // 2]]
        eff = estimate.value
        speedup = eff * spec.world_size
        noise = (metrics.combined_noise(result.noise_rel, reference.noise_rel) if len(results) == 1
                 else estimate.half_width_rel)
        fraction = fixtures.preset(spec.model, spec.preset).convergence_fraction  # the workload's own bar
        loss_ref = self.baseline.reference(key, "final_loss") if self.baseline else None
        entry = self.baseline.cases.get(key, {}) if self.baseline else {}
        if (entry.get("steps"), entry.get("warmup")) != (spec.steps, spec.warmup):
            loss_ref = None  # a loss after a different number of steps says nothing about this run
        problems = tuple(dict.fromkeys(p for r in results for p in (  # every launch must train correctly
            checks.agreement(r), checks.loss_curve(r), checks.convergence(r, fraction),
            checks.final_loss(r, loss_ref.value if loss_ref else None,
                              loss_ref.tolerance if loss_ref else 0.0, f"{key} on {self.profile}"),
            sharding.check(r)) if p))
        base_ref = self.baseline.reference(key, "efficiency") if self.baseline else None
        tolerance = self.options.tolerance if self.options.tolerance is not None else (tolerances or {}).get(
            "efficiency")  # the command line wins over the test's marker, which wins over the baseline
        if base_ref is not None and tolerance is not None:
            base_ref = dataclasses.replace(base_ref, tolerance=tolerance)
        if problems:  # a wrong fast run is not a pass: no performance verdict
            verdict = V.Verdict(status=V.FAILED, message="\n".join(problems))
        elif case.oversubscribed:
            verdict = V.Verdict(status=V.NOT_MEANINGFUL,
                                message=f"{spec.topology} oversubscribes {self.host.cpu_cores} cores at "
                                        f"{spec.cpu_threads} thread(s) per rank: timing is not judged")
        else:
            verdict = V.judge(estimate, base_ref, f"{key} on {self.profile}",
                              baseline_noise=self.baseline.cases[key].get("noise_rel", 0.0) if base_ref else 0.0)
            if verdict.status == V.NOISY and self.options.strict:
                verdict = V.Verdict(status=V.FAILED, message=verdict.message + " (--scaling-strict)")
            if verdict.status == V.NO_BASELINE and self.options.require_baseline:
                verdict = V.Verdict(status=V.FAILED, message=verdict.message + " (--scaling-require-baseline)")
        if len(estimates) > 1 and not problems:  # --scaling-launches: show what was judged together
            verdict = dataclasses.replace(verdict, message=f"{verdict.message} (median of {len(estimates)} launches: "
                                          f"{', '.join(f'{e.value:.3f}' for e in estimates)})")
        if not problems:  # memory and bytes are judged even when timing is not meaningful
            over = resources.regressions(result, self.baseline, key, f"{key} on {self.profile}")
            if over and verdict.status != V.FAILED:
                verdict = V.Verdict(status=V.REGRESSED, message="\n".join(over + [verdict.message]))
        return Outcome(case_id=spec.case_id, key=key, status=verdict.status, message=verdict.message,
                       result=result, speedup=speedup, efficiency=eff, noise_rel=noise,
                       reference_throughput=reference.throughput, problems=problems,
                       baseline_efficiency=base_ref.value if base_ref else None, oversubscribed=case.oversubscribed,
                       resources=resources.summary(result), efficiency_ci=(estimate.low, estimate.high),
                       reference_step_times_s=tuple(reference.step_times_s), tolerances=dict(tolerances or {}),
                       launch_efficiencies=tuple(e.value for e in estimates) if len(estimates) > 1 else ())

    def _write(self, outcome: Outcome, spec: CaseSpec) -> None:
        data: dict[str, Any] = {k: v for k, v in dataclasses.asdict(outcome).items() if k != "result"}
        data.update(spec=spec.to_dict(), profile=self.profile, host=self.host.hostname, commit=commit(),
                    fingerprint=self.host.fingerprint(), written=time.time(),
                    result=outcome.result.to_dict() if outcome.result else None)
        traces = [r.extra["profile_trace"] for r in (outcome.result.ranks if outcome.result else ())
                  if r.extra.get("profile_trace")]
        if traces:  # --scaling-profile: one Chrome trace per rank (harness/profiling.py)
            data["traces"] = traces
        atomic.write_json(self.run_dir / f"{spec.case_id}.json", data)
        if self.options.tensorboard_dir is not None:
            tensorboard.write_case(self.options.tensorboard_dir / self.run_dir.name, outcome)


def _pooled(results: list[CaseResult]) -> CaseResult:
    """Several launches of a steady case as one: their measured steps in a row."""
    if len(results) == 1:
        return results[0]
    steps = [t for r in results for t in r.step_times_s]
    median = metrics.median(steps)
    return dataclasses.replace(results[0], step_times_s=steps, median_step_s=median, mad_step_s=metrics.mad(steps),
                               throughput=metrics.throughput(results[0].spec.global_batch_size, median),
                               noise_rel=metrics.median_noise_rel(steps))
