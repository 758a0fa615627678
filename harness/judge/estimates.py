"""Per-launch estimates the judge works from: classic efficiency and same-launch local efficiency.

- **efficiency** (DESIGN.md, the reports' figure): throughput of the case over the throughput of the
  single process measured in a separate 1x1 launch of the same session, divided by W. Medians of the
  measured steps; bootstrap interval from ``harness/stats.py``.
- **local efficiency** (docs/gate.md): in the same launch, per pair i, the ranks' mean local step over
  the slowest rank's distributed step (``harness/localstep.py``); the launch's value is the 20%-trimmed
  mean of the pairs' log ratios, exponentiated. Trimmed rather than a median: on the 2-core VMs it
  gave the same centre with a slightly narrower spread between launches (docs/detection.md, fifth set),
  and a stalled step in either half of a pair still cannot move it.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from harness import stats
from harness.judge.record import CaseRecord, LaunchRecord
from harness.stats import Estimate

TRIM = 0.2
MIN_PAIRS = 5


def trimmed_mean(values: np.ndarray, trim: float = TRIM, axis: int = -1) -> np.ndarray:
    ordered = np.sort(values, axis=axis)
    n = ordered.shape[axis]
    k = int(n * trim)
    return np.take(ordered, range(k, n - k), axis=axis).mean(axis=axis)


def local_efficiency(pair_s: Sequence[float], local_s: Sequence[float], *, resamples: int = stats.RESAMPLES,
                     seed: int = 0) -> Estimate | None:
    """exp(trimmed mean of ln(local_i / distributed_i)) with a bootstrap interval over pairs; None without pairs."""
    if len(pair_s) != len(local_s) or len(pair_s) < MIN_PAIRS or min(pair_s) <= 0 or min(local_s) <= 0:
        return None
    logs = np.log(np.asarray(local_s, dtype=float) / np.asarray(pair_s, dtype=float))
    value = math.exp(float(trimmed_mean(logs)))
    picks = np.random.default_rng(seed).integers(0, len(logs), size=(resamples, len(logs)))
    low, high = np.exp(np.percentile(trimmed_mean(logs[picks], axis=1), [2.5, 97.5]))
    return Estimate(value=value, low=min(float(low), value), high=max(float(high), value))


def classic(record: CaseRecord, launch: LaunchRecord) -> Estimate | None:
    """DESIGN.md's efficiency of one launch against the session's pooled 1x1 reference steps."""
    if not record.reference_step_times_s or not launch.step_times_s:
        return None
    return stats.efficiency_estimate(launch.step_times_s, record.global_batch, record.reference_step_times_s,
                                     record.reference_global_batch, record.world_size)


def local(launch: LaunchRecord) -> Estimate | None:
    return local_efficiency(launch.pair_step_times_s, launch.local_step_times_s)
