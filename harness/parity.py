"""Parity between two front ends of the same training: ``fabric-ddp`` must be ``ddp``.

Lightning Fabric's DDP wraps the same ``DistributedDataParallel`` around the same model, so with the
same seed, data and fp32 every rank's loss must match raw DDP step for step (bitwise in practice;
bound ``LOSS_ATOL``), and its throughput may fall short of DDP's by at most the tolerance: framework
overhead is a regression too. The tolerance is ``THROUGHPUT_TOLERANCE`` (25%) unless
``--scaling-tolerance`` overrides it: the two jobs are separate launches, and launch-to-launch
throughput on the shared 2-core CI machines spreads far more than one run's own noise band
(docs/detection.md: sigma 12-27%; a 10% bound failed a clean parity run in CI). On a quiet cluster
node pass ``--scaling-tolerance 0.1``; as for efficiency, a shortfall inside the measured noise band
is not called a regression, and an oversubscribed topology gets no timing verdict.

    pytest scaling_tests -k parity                         # every pair on the default topology (1x2)
    pytest scaling_tests -k "parity-fabric-ddp-vs-ddp-cnn-1x2"
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import atomic, matrix, metrics
from harness.errors import ScalegateError
from harness.hostinfo import HostInfo
from harness.launch import run_case
from harness.options import Options
from harness.results import CaseResult
from harness.spec import CaseSpec

PAIRS = (("fabric-ddp", "ddp"),)  # (candidate, baseline): the candidate is held to the baseline
TOPOLOGIES = ("1x2",)
LOSS_ATOL = 1e-6  # fp32, same seed and data: any larger difference is a different computation
THROUGHPUT_TOLERANCE = 0.25


@dataclass(frozen=True, kw_only=True)
class ParityCase:
    id: str  # parity-<candidate>-vs-<baseline>-<model>-<topology>, so -k selects naturally
    candidate: CaseSpec
    baseline: CaseSpec
    skip: str | None = None
    oversubscribed: bool = False


@dataclass(frozen=True, kw_only=True)
class ParityOutcome:
    case_id: str
    problems: tuple[str, ...]
    candidate_throughput: float | None = None
    baseline_throughput: float | None = None
    max_loss_diff: float | None = None
    timing_note: str = ""

    @property
    def failed(self) -> bool:
        return bool(self.problems)

    @property
    def message(self) -> str:
        return "\n".join(self.problems) or f"{self.case_id}: parity holds. {self.timing_note}".strip()


def build(options: Options, host: HostInfo, pairs=PAIRS, topologies=TOPOLOGIES) -> list[ParityCase]:
    cases = []
    for candidate, baseline in pairs:
        for model in options.models:
            for topology in topologies:
                specs = [matrix.spec_for(s, model, topology, options, host) for s in (candidate, baseline)]
                skip = next(filter(None, (matrix.skip_reason(s, host) for s in specs)), None)
                if skip is None and specs[0].topo.multi_node:
                    skip = f"parity runs single-node topologies; {topology} has {specs[0].topo.nodes} nodes"
                cases.append(ParityCase(
                    id=f"parity-{candidate}-vs-{baseline}-{model}-{topology}", candidate=specs[0],
                    baseline=specs[1], skip=skip,
                    oversubscribed=matrix.oversubscribed(specs[0].topo, host, options.cpu_threads)))
    return cases


def loss_problem(case_id: str, candidate: CaseResult, baseline: CaseResult, atol: float = LOSS_ATOL) -> tuple[str | None, float]:
    """Every rank's loss at every step (warm-up included) must match; returns (problem, max difference)."""
    worst = (0.0, 0, 0, math.nan, math.nan)
    for cand, base in zip(candidate.ranks, baseline.ranks):
        for step, (a, b) in enumerate(zip(cand.warmup_losses + cand.losses, base.warmup_losses + base.losses)):
            if math.isnan(a) and math.isnan(b):
                continue  # a rank that computes no loss does so in both
            diff = abs(a - b) if math.isfinite(a) and math.isfinite(b) else math.inf
            if diff > worst[0]:
                worst = (diff, cand.rank, step, a, b)
    diff, rank, step, a, b = worst
    if diff <= atol:
        return None, diff
    cs, bs = candidate.spec.strategy, baseline.spec.strategy
    return (f"loss parity failed [{case_id}] rank {rank} step {step}: {cs} loss {a:.9g} vs {bs} loss {b:.9g}, "
            f"difference {diff:.3g} > {atol:.0e} ({candidate.spec.dtype}, same seed and data): {cs} does not "
            f"compute what {bs} computes"), diff


def throughput_problem(case_id: str, candidate: CaseResult, baseline: CaseResult, tolerance: float) -> str | None:
    """The candidate may be at most ``tolerance`` slower than the baseline, beyond the noise band.

    As in ``harness.verdict``: a regression only when even the top of the ratio's noise band,
    ratio * (1 + noise), is below 1 - tolerance.
    """
    ratio = candidate.throughput / baseline.throughput
    noise = metrics.combined_noise(candidate.noise_rel, baseline.noise_rel)
    if ratio * (1 + noise) >= 1 - tolerance:
        return None
    shortfall = 1.0 - ratio
    cs, bs = candidate.spec.strategy, baseline.spec.strategy
    return (f"throughput parity failed [{case_id}]: {cs} {candidate.throughput:.1f} samples/s is {shortfall:.1%} "
            f"below {bs} {baseline.throughput:.1f} samples/s (tolerance {tolerance:.0%}, noise ±{noise:.1%}): "
            f"{cs}'s framework overhead is a regression")


@dataclass
class ParityRunner:
    """What a parity test holds: run both cases, compare losses and throughput, record the comparison."""

    case: ParityCase
    out_dir: Path  # <run dir>/parity
    tolerance: float = THROUGHPUT_TOLERANCE

    def run(self) -> ParityOutcome:
        case = self.case
        try:
            baseline = run_case(case.baseline, self.out_dir / case.id / case.baseline.case_id)
            candidate = run_case(case.candidate, self.out_dir / case.id / case.candidate.case_id)
        except ScalegateError as exc:
            return self._write(ParityOutcome(case_id=case.id, problems=(f"{case.id}: {exc}",)))
        loss, max_diff = loss_problem(case.id, candidate, baseline)
        problems = [loss] if loss else []
        note = ""
        if case.oversubscribed:
            note = f"{case.candidate.topology} oversubscribes this machine: throughput is not judged"
        elif not problems:  # a run that computes something else gets no performance verdict
            problems += filter(None, [throughput_problem(case.id, candidate, baseline, self.tolerance)])
        return self._write(ParityOutcome(
            case_id=case.id, problems=tuple(problems), candidate_throughput=candidate.throughput,
            baseline_throughput=baseline.throughput, max_loss_diff=max_diff, timing_note=note))

    def _write(self, outcome: ParityOutcome) -> ParityOutcome:
        data: dict[str, Any] = dataclasses.asdict(outcome)
        data.update(candidate=self.case.candidate.to_dict(), baseline=self.case.baseline.to_dict(),
                    tolerance=self.tolerance, loss_atol=LOSS_ATOL, written=time.time())
        atomic.write_json(self.out_dir / f"{self.case.id}.json", data)
        return outcome
