"""``judge(record, baseline, overrides) -> Outcome``: the one verdict of a case (pure: no I/O, no clock).

Order (a case that fails correctness reports no performance verdict):

1. no result (crash, hang, bad input): ``failed``;
2. correctness problems found by the session, and a final loss above the baseline's: ``failed``;
3. peak memory, bytes on the wire and checkpoint s/GB of the first launch against the baseline (no noise band);
4. timing, unless the topology oversubscribes the host: the sequential local-efficiency test where the
   baseline has a local efficiency and every launch measured pairs, else the classic efficiency
   (``timing.py``); throughput only where the test's marker asks for it;
5. the worst of these is the case's status; ``--scaling-strict`` fails ``noisy``, ``--scaling-require-baseline``
   fails ``no-baseline``;
6. a quarantine in the baseline (reason, until a date) keeps the verdict but not its failure (``quarantine.py``).

pytest (``harness/scalegate/session.py``), ``python -m scalegate compare`` and ``python -m scalegate gate`` all call this
function on the same ``CaseRecord``, so they cannot disagree (tests/test_judge.py runs the same records
through pytest and compare).
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from scalegate import policy
from scalegate.contract import metrics
from scalegate.figures import peaks, stats
from scalegate.figures.stats import Estimate
from scalegate.judge import ab, budgets, estimates, ledger, references, timing
from scalegate.judge import metric as V
from scalegate.judge.evidence import CaseRecord
from scalegate.judge.outcome import AB, LOCAL, SEVERITY, MetricVerdict, Outcome, Overrides
from scalegate.record import quarantine
from scalegate.record.baselines import BaselineFile


def judge(
    record: CaseRecord,
    baseline: BaselineFile | None,
    overrides: Overrides = Overrides(),
    base: CaseRecord | None = None,
) -> Outcome:
    """``base``: the same case's launches on the PR's base commit, measured in the same gate run (``ab.py``):
    timing, memory, bytes and final loss are then judged against them; ``baseline`` only lends its spreads and
    tolerances (and its quarantines: ``quarantine.py``)."""
    return _quarantine(_verdict(record, baseline, overrides, base), baseline, overrides)


def _verdict(
    record: CaseRecord, baseline: BaselineFile | None, overrides: Overrides, base: CaseRecord | None
) -> Outcome:
    outcome = Outcome(
        case_id=record.case_id,
        key=record.key,
        status=V.FAILED,
        message="",
        launches=len(record.launches),
        oversubscribed=record.oversubscribed,
        tolerances=dict(record.tolerances),
    )
    if record.failure or not record.launches:
        return dataclasses.replace(outcome, message=record.failure or f"{record.case_id}: no launch produced a result")
    if base is not None and (base.failure or not base.launches):
        return dataclasses.replace(
            _estimates(record, outcome, baseline),
            status=V.NO_BASELINE,
            message=f"the base commit has no result for {record.case_id}, nothing to compare "
            f"with: {base.failure or 'no launch'} [{record.where}]",
        )
    outcome = _estimates(record, outcome, baseline, base)
    budget = baseline if base is None else ab.as_baseline(base, baseline)  # memory, bytes, final loss
    problems = tuple(dict.fromkeys([*record.problems, *budgets.final_loss(record, budget)]))
    if problems:  # a wrong fast run is not a pass: no performance verdict
        return dataclasses.replace(outcome, problems=problems, message="\n".join(problems))
    exact = _exact(record, baseline, overrides, base)  # the collectives, judged exactly before anything timed
    found: list[MetricVerdict] = list(exact.metrics)
    found += budgets.memory(record, record.launches[0], budget)
    found += budgets.wire(record, record.launches[0], budget)
    found += budgets.checkpoint(record, record.launches[0], budget)
    resources_regressed = any(v.status == V.REGRESSED for v in found)
    decided = _efficiency(record, outcome, baseline, overrides, base)
    found.append(decided.verdict)
    more, needs_reference = (0, False) if resources_regressed else (decided.next_launches, decided.needs_reference)
    gate, state = decided.gate, decided.sequential
    if decided.timed:
        found += budgets.throughput(record, _throughput(record), baseline, overrides)
    if not record.oversubscribed:
        found += budgets.mfu(record, _mfu(record), baseline, overrides)
    status, message = _combine(found, overrides)
    if exact.note:  # the collectives changed without deciding the case: said beside the verdict that did
        message = f"{message}\n{exact.note}"
    if record.note:  # on the verdict's line, before any HINT under it
        first, _, rest = message.partition("\n")
        message = f"{first} [{record.note}]" + (f"\n{rest}" if rest else "")
    return dataclasses.replace(
        outcome,
        status=status,
        message=message,
        metrics=tuple(found),
        gate=gate,
        sequential=state,
        next_launches=more,
        needs_reference=needs_reference,
        tolerance=_tolerance_used(record, gate, baseline, overrides),
        collectives=exact.as_dict(),
    )


def _exact(
    record: CaseRecord, baseline: BaselineFile | None, overrides: Overrides, base: CaseRecord | None
) -> ledger.Exact:
    """The ledger's verdict against the base commit's launches, else against the stored baseline's ledger."""
    head = [launch.ledger for launch in record.launches]
    tolerance = record.conduct.ledger_tolerance if overrides.ledger_tolerance is None else overrides.ledger_tolerance
    if base is not None:
        theirs = [launch.ledger for launch in base.launches]
        return ledger.judge(head, theirs, "the base commit", tolerance, record.where)
    entry = baseline.cases.get(record.key) if baseline else None
    if entry is None:
        return ledger.Exact(ledger.NONE)  # nothing stored for the case: its other verdicts say so
    found = [entry["ledger"]] if entry.get("ledger") else [{"unavailable": "recorded before the ledger existed"}]
    return ledger.judge(head, found, "the baseline", tolerance, record.where)


@dataclasses.dataclass(frozen=True)
class _Efficiency:
    verdict: MetricVerdict
    gate: str = ""
    sequential: dict = dataclasses.field(default_factory=dict)
    next_launches: int = 0
    needs_reference: bool = False
    timed: bool = False  # a timing verdict was reached for (not oversubscribed, not the reference itself)


def _efficiency(
    record: CaseRecord, outcome: Outcome, baseline: BaselineFile | None, overrides: Overrides, base: CaseRecord | None
) -> _Efficiency:
    """The timing verdict: not meaningful when oversubscribed or for the reference itself, else A/B or stored."""
    if record.oversubscribed:
        return _Efficiency(
            verdict=MetricVerdict(metric="efficiency", status=V.NOT_MEANINGFUL, message=record.oversubscribed_why)
        )
    if record.reference_itself:  # measured against its own launches: nothing to judge but memory and bytes
        known = base is not None or (baseline is not None and record.key in baseline.cases)  # else require fails
        message = (
            f"the single-process reference: its efficiency is 1 by definition [{record.where}]"
            if known
            else f"no baseline for {record.where}"
        )
        status = V.NOT_MEANINGFUL if known else V.NO_BASELINE
        return _Efficiency(verdict=MetricVerdict(metric="efficiency", status=status, message=message))
    decided = (
        ab.timing(record, base, baseline, overrides)
        if base is not None
        else _timing(record, outcome, baseline, overrides)
    )
    metric = "local_efficiency" if decided.gate in (LOCAL, AB) else "efficiency"
    busy = _contended(record, base)
    status, message = decided.status, decided.message
    if busy and status in (V.OK, V.IMPROVED, V.REGRESSED, V.NOISY):
        # another program's load is not the change's: no timing verdict from this host; the rounds go on as the
        # sequential test asks, so a gate's budget and its notes are an idle host's
        status, message = V.NOISY, f"{busy}\n{message}"
    return _Efficiency(
        verdict=MetricVerdict(metric=metric, status=status, message=message),
        gate=decided.gate,
        sequential=decided.sequential,
        next_launches=decided.next_launches,
        needs_reference=decided.needs_reference,
        timed=True,
    )


def _contended(record: CaseRecord, base: CaseRecord | None) -> str:
    """Why the timing cannot be trusted where other work held a launch's cores (figures/resources.py ``cpu_wait``),
    else ""."""
    launches = [*record.launches, *(base.launches if base is not None else ())]
    wait = max((launch.cpu_wait or 0.0 for launch in launches), default=0.0)
    steal = max((launch.steal or 0.0 for launch in launches), default=0.0)
    if wait < policy.CONTENDED_WAIT and steal < policy.CONTENDED_WAIT:
        return ""
    what = (
        f"a rank waited for a core {wait:.0%} of its measured steps"
        if wait >= policy.CONTENDED_WAIT
        else f"the hypervisor took {steal:.0%} of the host's cores (steal)"
    )
    return (
        f"timing not judged: other processes held the case's cores ({what}; the limit is "
        f"{policy.CONTENDED_WAIT:.0%}): rerun it with nothing else running on them [{record.where}]"
    )


def _tolerance_used(record: CaseRecord, gate: str, baseline: BaselineFile | None, overrides: Overrides) -> float | None:
    """The efficiency tolerance the timing verdict was decided with (references.py), for the table and compare."""
    if gate in (LOCAL, AB):
        return references.efficiency_tolerance(record, overrides, baseline)
    ref = references.reference(baseline, record, "efficiency", overrides)
    return ref.tolerance if ref is not None else None


def _quarantine(outcome: Outcome, baseline: BaselineFile | None, overrides: Overrides) -> Outcome:
    """A flaky case the baseline quarantines until a date: the verdict stands, reported, but does not fail."""
    found = quarantine.of(baseline.cases.get(outcome.key) if baseline else None)
    if found is None:
        return outcome
    if not found.active(overrides.today):
        return dataclasses.replace(
            outcome,
            message=f"{outcome.message}\n(its quarantine ran out on {found.until}: {found.reason}; it gates again)",
        )
    if outcome.status not in (V.REGRESSED, V.FAILED):
        return dataclasses.replace(outcome, quarantined=found.describe())
    return dataclasses.replace(
        outcome,
        quarantined=found.describe(),
        message=f"quarantined, not failing: {found.describe()}; the verdict was: {outcome.message}",
    )


def _timing(record: CaseRecord, outcome: Outcome, baseline: BaselineFile | None, overrides: Overrides) -> timing.Timing:
    values = list(outcome.launch_local_efficiencies)
    if baseline is not None and timing.local_baseline(baseline, record) and len(values) == len(record.launches):
        return timing.local(record, values, baseline, overrides)
    classic = [e for e in (estimates.classic(record, launch) for launch in record.launches) if e is not None]
    if not classic:
        return timing.Timing(
            gate="",
            status=V.NO_BASELINE if baseline is None else V.NOT_MEANINGFUL,
            message=f"no efficiency: neither a reference launch nor same-launch pairs [{record.where}]",
        )
    return timing.classic(record, stats.pooled_estimate(classic), classic, baseline, overrides)


def _estimates(
    record: CaseRecord, outcome: Outcome, baseline: BaselineFile | None, base: CaseRecord | None = None
) -> Outcome:
    """Both efficiencies of every launch, and the pooled figures the table and the records show (against the
    base commit's pooled local efficiency in an A/B run)."""
    classic = [estimates.classic(record, launch) for launch in record.launches]
    local = [estimates.local(launch) for launch in record.launches]
    values: dict = {}
    if all(e is not None for e in classic):
        pooled = stats.pooled_estimate(classic)  # type: ignore[arg-type]
        ref_median = metrics.median(record.reference_step_times_s)
        values.update(
            efficiency=pooled.value,
            speedup=pooled.value * record.world_size,
            efficiency_ci=(pooled.low, pooled.high) if math.isfinite(pooled.high) else None,
            noise_rel=pooled.half_width_rel if math.isfinite(pooled.half_width_rel) else None,
            reference_throughput=metrics.throughput(record.reference_global_batch, ref_median),
            launch_efficiencies=tuple(e.value for e in classic) if len(classic) > 1 else (),
        )  # type: ignore[union-attr]
    if local and all(e is not None for e in local):
        pooled_local = stats.pooled_estimate(local)  # type: ignore[arg-type]
        values.update(
            local_efficiency=pooled_local.value,
            launch_local_efficiencies=tuple(e.value for e in local),  # type: ignore[union-attr]
            local_ci=(pooled_local.low, pooled_local.high) if math.isfinite(pooled_local.high) else None,
        )
    values.update(_flops(record))
    ref = references.reference(baseline, record, "efficiency")
    entry = timing.local_baseline(baseline, record)
    base_local = float(entry["value"]) if entry else None
    if base is not None:  # both sides as the A/B test sees them: geometric means over the rounds both measured
        paired = ab.pairs(record, base)
        base_local = math.exp(statistics.mean(math.log(b) for _, b in paired)) if paired else None
        if paired:
            values["local_efficiency"] = math.exp(statistics.mean(math.log(h) for h, _ in paired))
    return dataclasses.replace(
        outcome, baseline_efficiency=ref.value if ref else None, baseline_local_efficiency=base_local, **values
    )


def _throughput(record: CaseRecord) -> Estimate | None:
    per_launch = [
        stats.throughput_estimate(launch.step_times_s, record.global_batch)
        for launch in record.launches
        if len(launch.step_times_s) >= stats.MIN_VALUES
    ]
    return stats.pooled_estimate(per_launch) if per_launch else None


def _mfu(record: CaseRecord) -> Estimate | None:
    """MFU with the throughput's interval: counted FLOPs per sample x samples/s, per device, over its peak."""
    samples = _throughput(record)
    if samples is None or not record.flops_per_step or not record.peak_flops:
        return None
    scale = record.flops_per_step / record.global_batch / record.world_size / record.peak_flops
    return Estimate(value=samples.value * scale, low=samples.low * scale, high=samples.high * scale)


def _flops(record: CaseRecord) -> dict:
    """tokens/s, achieved FLOP/s per device and MFU for the table and the records; why MFU is n/a where it is."""
    samples = _throughput(record)
    if samples is None:
        return {"mfu_unavailable": "n/a: too few measured steps"}
    achieved, value = peaks.mfu(
        record.flops_per_step, samples.value, record.global_batch, record.world_size, record.peak_flops
    )
    estimate = _mfu(record)
    why = (
        ""
        if value is not None
        else (
            f"n/a: FLOPs {record.flops_unavailable}"
            if not record.flops_per_step
            else record.peak_source or "n/a: no peak for this device"
        )
    )
    return {
        "tokens_per_s": samples.value * record.tokens_per_sample if record.tokens_per_sample else None,
        "flops_per_step": record.flops_per_step,
        "achieved_flops": achieved,
        "mfu": value,
        "mfu_ci": (estimate.low, estimate.high) if estimate and math.isfinite(estimate.high) else None,
        "peak_flops": record.peak_flops,
        "peak_source": record.peak_source,
        "mfu_unavailable": why,
    }


def _combine(found: list[MetricVerdict], overrides: Overrides) -> tuple[str, str]:
    """The worst verdict is the case's; its message lists every non-ok metric, worst first."""
    if not found:
        return V.NO_BASELINE, "no baseline and nothing to judge"
    ranked = sorted(found, key=lambda v: SEVERITY.index(v.status))
    status = ranked[0].status
    shown = [v.message for v in ranked if v.status not in (V.OK,) and v.message] or [
        next(v.message for v in found if v.metric in ("efficiency", "local_efficiency"))
        if any(v.metric in ("efficiency", "local_efficiency") for v in found)
        else ranked[0].message
    ]
    message = "\n".join(shown)
    if status == V.NOISY and overrides.strict:
        return V.FAILED, message + " (--scaling-strict)"
    if status == V.NO_BASELINE and overrides.require_baseline:
        return V.FAILED, message + " (--scaling-require-baseline)"
    return status, message
