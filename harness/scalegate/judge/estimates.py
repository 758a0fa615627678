"""Per-launch estimates the judge works from: classic efficiency and same-launch local efficiency.

- **efficiency** (docs/concepts.md, the reports' figure): throughput of the case over the throughput of the
  single process measured in a separate 1x1 launch of the same session, divided by W. Medians of the
  measured steps; bootstrap interval from ``harness/scalegate/figures/stats.py``.
- **local efficiency** (docs/gate.md): in the same launch, per pair i, the ranks' mean local step over
  the slowest rank's distributed step (``harness/scalegate/measure/local_steps.py``); the launch's value is the 20%-trimmed
  mean of the pairs' log ratios, exponentiated. Trimmed rather than a median: the same centre with a slightly
  narrower spread between launches (docs/evidence/detection.md#designing-the-same-launch-reference), and a
  stalled step in either half of a pair still cannot move it.
"""

from __future__ import annotations

from typing import Sequence

from scalegate.figures import stats
from scalegate.figures.stats import Estimate
from scalegate.judge.evidence import CaseRecord, LaunchRecord

MIN_PAIRS = 5


def local_efficiency(pair_s: Sequence[float], local_s: Sequence[float]) -> Estimate | None:
    """exp(trimmed mean of ln(local_i / distributed_i)) with a bootstrap interval over pairs; None without pairs.
    The same paired estimate parity uses (``stats.paired_ratio_estimate``)."""
    if len(pair_s) != len(local_s) or len(pair_s) < MIN_PAIRS or min(pair_s) <= 0 or min(local_s) <= 0:
        return None
    return stats.paired_ratio_estimate(local_s, pair_s)


def classic(record: CaseRecord, launch: LaunchRecord) -> Estimate | None:
    """The efficiency (docs/concepts.md) of one launch against the session's pooled 1x1 reference steps."""
    if not record.reference_step_times_s or not launch.step_times_s:
        return None
    return stats.efficiency_estimate(
        launch.step_times_s,
        record.global_batch,
        record.reference_step_times_s,
        record.reference_global_batch,
        record.world_size,
    )


def classic_own(record: CaseRecord, launch: LaunchRecord) -> Estimate | None:
    """The classic efficiency of a launch against the reference of its own session where the record keeps it (a
    gate round's), else against the record's pooled reference: rounds then do not share one reference's luck."""
    reference = launch.reference_step_times_s or record.reference_step_times_s
    if not reference or not launch.step_times_s:
        return None
    return stats.efficiency_estimate(
        launch.step_times_s, record.global_batch, reference, record.reference_global_batch, record.world_size
    )


def local(launch: LaunchRecord) -> Estimate | None:
    return local_efficiency(launch.pair_step_times_s, launch.local_step_times_s)
