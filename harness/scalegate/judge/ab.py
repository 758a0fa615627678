"""A/B: a pull request's launches judged against its base commit's, measured in the same gate run, same machine.

Why not a stored baseline: on shared machines a case's local efficiency has a level of its own on every VM and
day, larger than the drops the gate must catch (docs/evidence/detection.md#each-vm-has-its-own-level).
Measuring the base commit in the same run removes that level, as ``asv continuous`` and Chromium's pinpoint do. ``python -m scalegate gate --base REF`` launches both commits in alternating order round by round
(harness/scalegate/gate/rounds.py) and hands each case's two records to ``scalegate.judge.judge(..., base=...)``.

The test: per round r, x_r = ln(L_head,r / L_base,r) of the two launches' local efficiencies; the sequential
test of ``sequential.py`` on the ratios against 1 (no change) and 1 - detect, with no baseline error of its own
(both sides are measured alike: M = infinity, no drift). Sigma of x_r: sqrt(2) times the spread of ln L between
launches recorded for the case (``record-baselines``), else the median spread recorded for the profile's cases,
else ``DEFAULT_SIGMA``; never below ``SIGMA_FLOOR``; from ``OWN_SPREAD_ROUNDS`` rounds on, the rounds' own spread
of x when it is larger (an estimate can only make the test more careful, never bolder). Either verdict needs
``MIN_ROUNDS`` rounds.

Memory, bytes on the wire and the final loss are judged against the base commit's first launch, with the stored
baseline's tolerances where it has them (``as_baseline``): a PR that adds an all-reduce shows in its bytes.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from scalegate import policy
from scalegate.judge import duet, duet_floors, estimates, sequential
from scalegate.judge import metric as V
from scalegate.judge.evidence import CaseRecord
from scalegate.judge.outcome import AB, Overrides
from scalegate.judge.timing import MIN_SIGMA_LAUNCHES, Timing, decided
from scalegate.record.baselines import BaselineFile

DEFAULT_SIGMA = 0.05  # one launch's spread of ln(local efficiency) where nothing was recorded
OWN_SPREAD_ROUNDS = 2  # the rounds own spread only ever widens sigma, so it may start at two
# A floor on the paired spread of rounds that do not pair in time: each side's session starts its own agents, so a
# round's ln(head/base) spreads wider than the recorded launch spreads suggest
# (docs/evidence/detection.md#the-ab-gate-replayed-over-real-rounds).
SIGMA_FLOOR = 0.05
# The same floor for rounds compared on the classic efficiency (a training script's): each round's ratio holds two
# multi-rank launches and two 1x1 launches, each spreading about 4% on these VMs, so about twice the local floor;
# a floor set from that arithmetic, not yet from recorded A/A rounds (docs/your-script.md says so)
CLASSIC_SIGMA_FLOOR = 0.10
MIN_ROUNDS = policy.MIN_ROUNDS
DEFAULT_TOLERANCES = {
    "peak_memory_bytes": 0.25,
    "bytes_per_step": 0.05,
    "final_loss": 0.25,
    "checkpoint_s_per_gb": 1.0,
}  # harness/scalegate/record/update.py CHECKPOINT_TOLERANCE


def sigma_prior(baseline: BaselineFile | None, key: str) -> tuple[float, str]:
    """One launch's spread of ln(local efficiency), and where it comes from."""
    recorded = {
        k: float(e["local_efficiency"]["sigma"])
        for k, e in (baseline.cases if baseline else {}).items()
        if isinstance(e.get("local_efficiency"), dict)
        and e["local_efficiency"].get("sigma")
        and int(e["local_efficiency"].get("launches") or 0) >= MIN_SIGMA_LAUNCHES
    }
    if key in recorded:
        return recorded[key], f"recorded for {key}"
    if recorded:
        return statistics.median(recorded.values()), f"the median recorded for {len(recorded)} cases of the profile"
    return DEFAULT_SIGMA, "a default: no spread recorded for this profile"


def pairs(record: CaseRecord, base: CaseRecord) -> list[tuple[float, float]]:
    """(head, base) local efficiency per round, in round order; rounds where either side has no pairs are left out."""
    out = []
    for head_launch, base_launch in zip(record.launches, base.launches):
        head, other = estimates.local(head_launch), estimates.local(base_launch)
        if head is not None and other is not None:
            out.append((head.value, other.value))
    return out


def classic_pairs(record: CaseRecord, base: CaseRecord) -> list[tuple[float, float]]:
    """(head, base) efficiency per round, each launch against its own round's 1x1 launch, where no round has
    same-launch pairs (a training script: there is no local copy of its model). Each round's own reference, not the
    rounds' pooled one: a pooled reference gives every round of a side the same luck, and the sequential test,
    reading the rounds as independent, once read an A/A run's lucky base reference as an 18% drop in two rounds. A
    change of the single-process speed alone (a slower model on one process too) cancels, as efficiency is meant to."""
    out = []
    for head_launch, base_launch in zip(record.launches, base.launches):
        head, other = estimates.classic_own(record, head_launch), estimates.classic_own(base, base_launch)
        if head is not None and other is not None:
            out.append((head.value, other.value))
    return out


def timing(record: CaseRecord, base: CaseRecord, baseline: BaselineFile | None, overrides: Overrides) -> Timing:
    paired = duet.timing(record, base, baseline, overrides)  # both commits took turns step by step (docs/duet.md)
    if paired is not None:
        return paired
    found_pairs, what = pairs(record, base), "local efficiency"
    if not found_pairs and not any(launch.pair_step_times_s for launch in (*record.launches, *base.launches)):
        found_pairs, what = classic_pairs(record, base), "efficiency"
    if not found_pairs:
        return Timing(
            gate=AB,
            status=V.NOT_MEANINGFUL,
            message=f"A/B compares the local efficiency: no round measured same-launch pairs on both "
            f"commits (--scaling-local-steps 0, or a replica that does not fit) [{record.where}]",
        )
    ratios = [h / b for h, b in found_pairs]
    one, source = sigma_prior(baseline, record.key)
    sigma = math.sqrt(2) * one
    logs = [math.log(r) for r in ratios]
    floor = SIGMA_FLOOR if what == "local efficiency" else CLASSIC_SIGMA_FLOOR
    if sigma < floor:
        sigma, source = floor, f"the floor of A/B rounds on these VMs (above {source})"
    if len(logs) >= OWN_SPREAD_ROUNDS and statistics.stdev(logs) > sigma:
        sigma, source = statistics.stdev(logs), f"the {len(logs)} rounds' own spread, above {source}"
    design = duet_floors.rounds_design(record, baseline, overrides, sigma_floor=floor)
    detect = design.detect
    found = sequential.decide(ratios, 1.0, sigma, math.inf, design)  # type: ignore[arg-type]
    state = sequential.state(found, design, sigma_source=source, rounds=len(ratios))
    head = math.exp(statistics.mean(math.log(h) for h, _ in found_pairs))
    other = math.exp(statistics.mean(math.log(b) for _, b in found_pairs))
    over = (
        f"{len(ratios)} round{'s' if len(ratios) > 1 else ''} (head/base "
        f"{', '.join(f'{h:.3f}/{b:.3f}' for h, b in found_pairs)})"
    )
    test = f"A/B sequential test: {sequential.power(design)}; paired spread ±{found.sigma:.1%}, {source}"
    where = f"[{record.where}, A/B against the base commit{duet.fallback(record, base)}]"
    done = decided(AB, found, state, head, f"the base commit's {other:.3f}", over, test, where, what, other)
    if done is not None:
        return done
    more = len(ratios) < design.max_launches
    tail = (
        "undecided, launching both again"
        if more
        else f"still undecided between no change and a {detect:.0%} drop after the budget of {design.max_launches} "
        f"rounds; raise --scaling-max-launches or rerun"
    )
    return Timing(
        gate=AB,
        status=V.NOISY,
        next_launches=1 if more else 0,
        sequential=state,
        message=f"{what} {head:.3f} vs the base commit's {other:.3f} ({found.change:+.1%} over "
        f"{over}): {tail} ({test}) {where}",
    )


def as_baseline(base: CaseRecord, stored: BaselineFile | None) -> BaselineFile:
    """The base commit's first launch as a baseline entry for memory, bytes and final loss (the stored file's
    tolerances where it has them), so ``budgets`` judges them exactly as it judges a stored baseline."""
    first = base.launches[0]
    kept = stored.cases.get(base.key, {}) if stored else {}

    def tolerance(metric: str) -> float:
        entry = kept.get(metric)
        return (
            float(entry["tolerance"])
            if isinstance(entry, dict) and "tolerance" in entry
            else DEFAULT_TOLERANCES[metric]
        )

    entry: dict = {"steps": base.steps, "warmup": base.warmup}
    if first.peak_memory_bytes:
        entry.update(
            peak_memory_bytes={"value": list(first.peak_memory_bytes), "tolerance": tolerance("peak_memory_bytes")},
            memory_source=first.memory_source,
        )
    if first.bytes_per_step is not None:
        entry["bytes_per_step"] = {"value": first.bytes_per_step, "tolerance": tolerance("bytes_per_step")}
    if first.checkpoint_s_per_gb is not None:
        entry["checkpoint_s_per_gb"] = {
            "value": first.checkpoint_s_per_gb,
            "tolerance": tolerance("checkpoint_s_per_gb"),
        }
    if first.final_loss is not None and math.isfinite(first.final_loss):
        entry["final_loss"] = {"value": first.final_loss, "tolerance": tolerance("final_loss")}
    return BaselineFile(path=Path("<the base commit>"), profile=base.profile, fingerprint={}, cases={base.key: entry})
