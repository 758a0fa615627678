"""Parity between two front ends of the same training: ``fabric-ddp`` must be ``ddp``.

Lightning Fabric's DDP wraps the same ``DistributedDataParallel`` around the same model, so with the
same seed, data and fp32 every rank's loss must match raw DDP step for step (bitwise in practice;
bound ``LOSS_ATOL``), and its throughput may fall short of DDP's by at most the tolerance: framework
overhead is a regression too.

Both front ends train in ONE launch, interleaved: the candidate's spec names the baseline as its
``companion``, and every rank runs the candidate's step and the baseline's back to back in every step,
alternating which goes first (harness/companion.py), as Lightning's own parity benchmark runs its front
ends in the same processes. Measured as two separate launches on the shared 2-core CI machines, the two
throughputs differed by 10-35% from noise alone, and a clean run failed parity at a 25% tolerance; in one
launch a slow phase of the host slows both halves of a step, and it cancels in their ratio.

Throughput parity is judged on those pairs: r_i = baseline step i / candidate step i (the candidate's
throughput relative to the baseline's), estimated as exp of the 20%-trimmed mean of ln r_i with a seeded
bootstrap 95% interval (``harness.stats.paired_ratio_estimate``). As for efficiency, a regression only
when even the top of the interval is below 1 - tolerance; the tolerance is ``THROUGHPUT_TOLERANCE``
(10%: the paired ratio's own noise is a few %) unless ``--scaling-tolerance`` overrides it. An
oversubscribed topology gets no timing verdict; a launch whose losses differ gets none either.

    pytest scaling_tests -k parity                         # every pair on the default topology (1x2)
    pytest scaling_tests -k "parity-fabric-ddp-vs-ddp-cnn-1x2"
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import atomic, matrix, metrics, stats
from harness.errors import ScalegateError
from harness.hostinfo import HostInfo
from harness.launch import run_case
from harness.options import Options
from harness.results import CaseResult
from harness.spec import CaseSpec

if TYPE_CHECKING:
    from harness.launch import warm

PAIRS = (("fabric-ddp", "ddp"),)  # (candidate, baseline): the candidate is held to the baseline
TOPOLOGIES = ("1x2",)
LOSS_ATOL = 1e-6  # fp32, same seed and data: any larger difference is a different computation
THROUGHPUT_TOLERANCE = 0.10


@dataclass(frozen=True, kw_only=True)
class ParityCase:
    id: str  # parity-<candidate>-vs-<baseline>-<model>-<topology>, so -k selects naturally
    spec: CaseSpec  # the candidate's, with the baseline as its companion: one launch trains both
    skip: str | None = None
    oversubscribed: bool = False

    @property
    def candidate(self) -> str:
        return self.spec.strategy

    @property
    def baseline(self) -> str:
        return self.spec.companion


@dataclass(frozen=True, kw_only=True)
class ParityOutcome:
    case_id: str
    problems: tuple[str, ...]
    candidate_throughput: float | None = None  # samples/s over the median step, each front end's own
    baseline_throughput: float | None = None
    ratio: float | None = None  # candidate throughput / baseline throughput, from the paired steps
    ratio_ci: tuple[float, float] | None = None  # its bootstrap 95% interval
    step_ratios: dict[str, Any] = field(default_factory=dict)  # summary of the per-step ratios
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
                # parity judges losses and the paired steps only: the same-launch local window would be idle time
                spec = matrix.spec_for(candidate, model, topology, options, host).replace(
                    companion=baseline, local_steps=0)
                skip = matrix.skip_reason(spec, host)  # either strategy's reason, or an unknown companion's error
                if skip is None and spec.topo.multi_node:
                    skip = f"parity runs single-node topologies; {topology} has {spec.topo.nodes} nodes"
                cases.append(ParityCase(
                    id=f"parity-{candidate}-vs-{baseline}-{model}-{topology}", spec=spec, skip=skip,
                    oversubscribed=matrix.oversubscribed(spec.topo, host, options.cpu_threads)))
    return cases


def loss_problem(case_id: str, result: CaseResult, atol: float = LOSS_ATOL) -> tuple[str | None, float]:
    """Every rank's loss at every step (warm-up included) must match its companion's; (problem, max difference)."""
    cs, bs = result.spec.strategy, result.spec.companion
    worst = (0.0, 0, 0, math.nan, math.nan)
    for rank in result.ranks:
        cand = rank.warmup_losses + rank.losses
        base = rank.companion_warmup_losses + rank.companion_losses
        if len(cand) != len(base):
            return (f"loss parity failed [{case_id}] rank {rank.rank}: {cs} recorded {len(cand)} losses, {bs} "
                    f"{len(base)}: the two did not train the same steps"), math.inf
        for step, (a, b) in enumerate(zip(cand, base)):
            if math.isnan(a) and math.isnan(b):
                continue  # a rank that computes no loss does so in both
            diff = abs(a - b) if math.isfinite(a) and math.isfinite(b) else math.inf
            if diff > worst[0]:
                worst = (diff, rank.rank, step, a, b)
    diff, rank_id, step, a, b = worst
    if diff <= atol:
        return None, diff
    return (f"loss parity failed [{case_id}] rank {rank_id} step {step}: {cs} loss {a:.9g} vs {bs} loss {b:.9g}, "
            f"difference {diff:.3g} > {atol:.0e} ({result.spec.dtype}, same seed and data): {cs} does not "
            f"compute what {bs} computes"), diff


def throughput_ratio(result: CaseResult) -> stats.Estimate:
    """The candidate's throughput relative to its companion's, from the launch's paired measured steps."""
    return stats.paired_ratio_estimate(result.companion_step_times_s, result.step_times_s)


def baseline_throughput(result: CaseResult) -> float:
    return metrics.throughput(result.spec.global_batch_size, metrics.median(result.companion_step_times_s))


def throughput_problem(case_id: str, result: CaseResult, ratio: stats.Estimate, tolerance: float) -> str | None:
    """The candidate may be at most ``tolerance`` slower than the baseline, beyond the ratio's interval:
    a regression only when even its top is below 1 - tolerance (as ``harness.verdict`` judges efficiency)."""
    if ratio.high >= 1 - tolerance:
        return None
    cs, bs = result.spec.strategy, result.spec.companion
    return (f"throughput parity failed [{case_id}]: {cs} runs at {ratio.value:.3f}x {bs}'s throughput "
            f"(95% interval {ratio.low:.3f}-{ratio.high:.3f}), below {1 - tolerance:.2f} (tolerance {tolerance:.0%}); "
            f"{cs} {result.throughput:.1f} vs {bs} {baseline_throughput(result):.1f} samples/s, both trained "
            f"interleaved step by step in one launch: {cs}'s framework overhead is a regression")


def step_ratio_summary(result: CaseResult) -> dict[str, Any]:
    ratios = [b / c for b, c in zip(result.companion_step_times_s, result.step_times_s)]
    return {"n": len(ratios), "min": min(ratios), "median": metrics.median(ratios), "max": max(ratios),
            "trim": stats.TRIM, "values": ratios} if ratios else {"n": 0}


@dataclass
class ParityRunner:
    """What a parity test holds: one launch of both front ends, losses and paired throughput compared, recorded."""

    case: ParityCase
    out_dir: Path  # <run dir>/parity
    tolerance: float = THROUGHPUT_TOLERANCE
    data_dir: str | None = None
    agents: "warm.AgentPool | None" = None  # the session's warm torchrun agent (--scaling-launcher warm)

    def run(self) -> ParityOutcome:
        case = self.case
        try:
            result = run_case(case.spec, self.out_dir / case.id, data_dir=self.data_dir, agents=self.agents)
        except ScalegateError as exc:
            return self._write(ParityOutcome(case_id=case.id, problems=(f"{case.id}: {exc}",)))
        loss, max_diff = loss_problem(case.id, result)
        ratio = throughput_ratio(result)
        problems = [loss] if loss else []
        note = (f"{case.candidate} at {ratio.value:.3f}x {case.baseline}'s throughput "
                f"(95% interval {ratio.low:.3f}-{ratio.high:.3f}, interleaved in one launch)")
        if case.oversubscribed:
            note = f"{case.spec.topology} oversubscribes this machine: throughput is not judged"
        elif not problems:  # a run that computes something else gets no performance verdict
            problems += filter(None, [throughput_problem(case.id, result, ratio, self.tolerance)])
        return self._write(ParityOutcome(
            case_id=case.id, problems=tuple(problems), candidate_throughput=result.throughput,
            baseline_throughput=baseline_throughput(result), ratio=ratio.value, ratio_ci=(ratio.low, ratio.high),
            step_ratios=step_ratio_summary(result), max_loss_diff=max_diff, timing_note=note))

    def _write(self, outcome: ParityOutcome) -> ParityOutcome:
        data: dict[str, Any] = dataclasses.asdict(outcome)
        data.update(spec=self.case.spec.to_dict(), candidate=self.case.candidate, baseline=self.case.baseline,
                    interleaved=True, tolerance=self.tolerance, loss_atol=LOSS_ATOL, written=time.time())
        atomic.write_json(self.out_dir / f"{self.case.id}.json", data)
        return outcome
