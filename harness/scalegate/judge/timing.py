"""The timing verdict, on whichever efficiency decides better (docs/gate.md).

- **local** (the default where the baseline has it): the sequential test of ``sequential.py`` on each
  launch's same-launch local efficiency. More launches only while undecided, up to the run's budget.
- **classic** (fallback: no local baseline, no pairs, a replica that does not fit): docs/concepts.md's
  efficiency against the separate 1x1 launch, several launches as their median, a regression confirmed by
  ``--scaling-confirm`` rounds of fresh launches of the case and its reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from scalegate.figures.stats import Estimate
from scalegate.judge import metric as V
from scalegate.judge import sequential
from scalegate.judge.evidence import CaseRecord
from scalegate.judge.outcome import CLASSIC, LOCAL, Overrides
from scalegate.judge.references import efficiency_tolerance, host_spread, reference
from scalegate.record.baselines import BaselineFile

DEFAULT_SIGMA = 0.05  # a local baseline recorded from too few launches to measure its own spread
MIN_SIGMA_LAUNCHES = 3
# Between-session movement of a case's local efficiency on the same kind of machine, beyond its spread
# within a session (docs/evidence/detection.md#each-vm-has-its-own-level).
DRIFT = 0.01


@dataclass(frozen=True, kw_only=True)
class Timing:
    gate: str
    status: str
    message: str
    next_launches: int = 0
    needs_reference: bool = False
    sequential: dict[str, Any] = field(default_factory=dict)


def decided(
    gate: str,
    found: sequential.Decision,
    state: dict[str, Any],
    value: float,
    against: str,
    over: str,
    test: str,
    where: str,
    what: str = "local efficiency",
    reference: float = 1.0,
) -> Timing | None:
    """The local (or A/B) efficiency's decided verdicts, worded alike; None while the test is undecided. The change
    named is ``value`` against ``reference`` as measured (the test itself reads each launch clipped at three sigma)."""
    detect, change = state["detect"], value / reference - 1
    if found.status == sequential.REGRESSED:
        return Timing(
            gate=gate,
            status=V.REGRESSED,
            sequential=state,
            message=f"{what} {value:.3f} is {-change:.1%} below {against} over {over}: a "
            f"{detect:.0%} drop explains it better than no change ({test}) {where}",
        )
    if found.status == sequential.OK:
        return Timing(
            gate=gate,
            status=V.OK,
            sequential=state,
            message=f"{what} {value:.3f} within {against} ({change:+.1%} over {over}; {test}) {where}",
        )
    return None


def local_baseline(baseline: BaselineFile | None, record: CaseRecord) -> dict[str, Any] | None:
    entry = (baseline.cases.get(record.key, {}) if baseline else {}).get("local_efficiency")
    return entry if isinstance(entry, dict) and entry.get("value") else None


def local(record: CaseRecord, values: list[float], baseline: BaselineFile, overrides: Overrides) -> Timing:
    entry = local_baseline(baseline, record)
    assert entry is not None
    detect = efficiency_tolerance(record, overrides, baseline)
    launches = int(entry.get("launches") or 1)
    sigma = float(entry["sigma"]) if entry.get("sigma") and launches >= MIN_SIGMA_LAUNCHES else DEFAULT_SIGMA
    conduct = record.conduct
    spread, recorded = host_spread(baseline, record)
    design = sequential.Design(
        detect=detect,
        alpha=conduct.alpha,
        beta=conduct.beta,
        max_launches=conduct.max_launches,
        drift=(DRIFT**2 + spread**2) ** 0.5,
    )
    found = sequential.decide(values, float(entry["value"]), sigma, launches, design)
    state = sequential.state(found, design, baseline_launches=launches, host_spread=spread)
    base = f"baseline {float(entry['value']):.3f}"
    over = f"{len(values)} launch{'es' if len(values) > 1 else ''} ({', '.join(f'{v:.3f}' for v in values)})"
    test = (
        f"sequential test: {sequential.power(design)}; "
        f"launch spread ±{found.sigma:.1%} from {launches} baseline launch{'es' if launches > 1 else ''}"
        + (
            f"; recorded on another host ({recorded}, this is {record.host}): hosts' levels spread ±{spread:.1%}"
            if spread
            else ""
        )
    )
    value = sum(values) / len(values)
    done = decided(LOCAL, found, state, value, base, over, test, f"[{record.where}]", reference=float(entry["value"]))
    if done is not None:
        return done
    reachable = sequential.decidable(values, float(entry["value"]), sigma, launches, design)
    return _undecided(
        record,
        found,
        design,
        state,
        f"local efficiency {value:.3f} vs {base}",
        over,
        test,
        spread,
        reachable=len(values) < design.max_launches and reachable,
        budget_left=len(values) < design.max_launches,
    )


_WAYS_OUT = (
    "record baselines on this host (python -m scalegate record-baselines) or gate against the base "
    "commit (python -m scalegate gate --base REF)"
)


def _undecided(
    record: CaseRecord,
    found: sequential.Decision,
    design: sequential.Design,
    state: dict[str, Any],
    what: str,
    over: str,
    test: str,
    spread: float,
    *,
    reachable: bool,
    budget_left: bool,
) -> Timing:
    """The local gate's undecided verdicts: launching again, undecidable within the budget, or out of budget."""
    head = f"{what} ({found.change:+.1%} over {over})"
    if budget_left and not reachable:
        cannot = (
            f"; with a baseline from another host no verdict is reachable within {design.max_launches} launches: "
            f"{_WAYS_OUT}"
            if spread
            else " and undecidable within the budget: raise --scaling-max-launches"
        )
        message = f"{head}: undecided{cannot} ({test}) [{record.where}]"
        return Timing(gate=LOCAL, status=V.NOISY, sequential=state, message=message)
    if budget_left:
        message = f"{head}: undecided, launching again ({test}) [{record.where}]"
        return Timing(gate=LOCAL, status=V.NOISY, next_launches=1, sequential=state, message=message)
    other_host = f"; a baseline from another host leaves this band: {_WAYS_OUT}" if spread else ""
    message = (
        f"{head}: still undecided between no change and a {design.detect:.0%} drop after the budget of "
        f"{design.max_launches} launches{other_host or '; raise --scaling-max-launches or rerun'} ({test}) "
        f"[{record.where}]"
    )
    return Timing(gate=LOCAL, status=V.NOISY, sequential=state, message=message)


def classic(
    record: CaseRecord,
    estimate: Estimate,
    launches: list[Estimate],
    baseline: BaselineFile | None,
    overrides: Overrides,
) -> Timing:
    ref = reference(baseline, record, "efficiency", overrides)
    noise = (baseline.cases.get(record.key, {}).get("noise_rel", 0.0) if baseline and ref else 0.0) or 0.0
    spread, recorded = host_spread(baseline, record) if baseline and ref else (0.0, "")
    # a baseline from another host: its level differs by the spread between hosts too (HOST_SPREAD)
    found = V.higher_is_better(
        estimate,
        ref,
        record.where,
        baseline_noise=math.hypot(noise, spread),
        noisy_limit=max(overrides.noisy_limit, math.hypot(overrides.noisy_limit, spread)),
    )
    message = found.message + (
        f" (baseline recorded on another host, {recorded}: hosts' levels spread ±{spread:.1%}, in the noise)"
        if spread
        else ""
    )
    if len(launches) > 1:
        message += f" (median of {len(launches)} launches: {', '.join(f'{e.value:.3f}' for e in launches)})"
    conduct = record.conduct
    rounds = len(record.launches) // max(conduct.launches, 1) - 1  # confirmation rounds made so far
    more = conduct.launches if found.status == V.REGRESSED and rounds < conduct.confirm else 0
    if rounds > 0:  # a relaunch happens only after a regressed round
        verb = "confirmed" if found.status == V.REGRESSED else "not confirmed"
        message += (
            f"\n(regression {verb} by relaunching the case and its reference; {len(record.launches)} "
            f"launches judged together)"
        )
    return Timing(gate=CLASSIC, status=found.status, message=message, next_launches=more, needs_reference=more > 0)
