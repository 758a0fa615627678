"""Robust timing statistics: median, MAD, and bootstrap confidence intervals.

Step times on shared machines are skewed (a stalled step is far slower, never far faster), so
every estimate is built on medians (a paired ratio on a trimmed mean, which drops the stalls), and
its uncertainty comes from resampling the measured steps rather than from a normal model.
Resampling uses a fixed seed: the same steps give the same verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from scalegate.contract.metrics import MAD_TO_SIGMA, MEDIAN_SE, Z95, efficiency, mad, median, speedup  # noqa: F401  (one place)

RESAMPLES = 2000
CONFIDENCE = 0.95
MIN_VALUES = 3  # fewer measured steps than this cannot bound their own median


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """A point estimate with its bootstrap confidence interval (``low <= value <= high``)."""

    value: float
    low: float
    high: float

    @property
    def half_width_rel(self) -> float:
        """The interval's larger half-width relative to the value (inf when nothing bounds it)."""
        if self.value <= 0 or not math.isfinite(self.low) or not math.isfinite(self.high):
            return math.inf
        return max(self.value - self.low, self.high - self.value) / self.value


def log_standard_error(estimate: Estimate) -> float | None:
    """The standard error of ln(value), from its bootstrap 95% interval; None where nothing bounds it."""
    if not (0 < estimate.low <= estimate.high < math.inf):
        return None
    return (math.log(estimate.high) - math.log(estimate.low)) / (2 * 1.96)


def _medians(values: Sequence[float], rng: np.random.Generator, resamples: int) -> np.ndarray:
    data = np.asarray(values, dtype=float)
    picks = rng.integers(0, len(data), size=(resamples, len(data)))
    return np.median(data[picks], axis=1)


def _interval(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail])
    return float(low), float(high)


def median_ci(
    values: Sequence[float], *, resamples: int = RESAMPLES, confidence: float = CONFIDENCE, seed: int = 0
) -> Estimate:
    """Bootstrap percentile interval of the median of ``values``."""
    center = median(values)
    if len(values) < MIN_VALUES:
        return Estimate(value=center, low=0.0, high=math.inf)
    low, high = _interval(_medians(values, np.random.default_rng(seed), resamples), confidence)
    return Estimate(value=center, low=min(low, center), high=max(high, center))


def throughput_estimate(
    step_times_s: Sequence[float], global_batch: int, *, resamples: int = RESAMPLES, seed: int = 0
) -> Estimate:
    """Samples/s = global batch / median step time, with the interval of that ratio."""
    steps = median_ci(step_times_s, resamples=resamples, seed=seed)
    return Estimate(
        value=global_batch / steps.value,
        low=global_batch / steps.high if steps.high > 0 else 0.0,
        high=global_batch / steps.low if steps.low > 0 else math.inf,
    )


def _efficiency(
    case_steps_s: Sequence[float], case_batch: int, ref_steps_s: Sequence[float], ref_batch: int, world_size: int
) -> float:
    """The efficiency of docs/concepts.md (harness/scalegate/contract/metrics.py) from the two median step times."""
    return efficiency(speedup(case_batch / median(case_steps_s), ref_batch / median(ref_steps_s)), world_size)


def efficiency_estimate(
    case_steps_s: Sequence[float],
    case_batch: int,
    ref_steps_s: Sequence[float],
    ref_batch: int,
    world_size: int,
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Estimate:
    """Efficiency = (case throughput / reference throughput) / W; both step series are resampled."""
    value = _efficiency(case_steps_s, case_batch, ref_steps_s, ref_batch, world_size)
    if len(case_steps_s) < MIN_VALUES or len(ref_steps_s) < MIN_VALUES:
        return Estimate(value=value, low=0.0, high=math.inf)
    rng = np.random.default_rng(seed)
    case_med = _medians(case_steps_s, rng, resamples)
    ref_med = _medians(ref_steps_s, rng, resamples)
    low, high = _interval((case_batch / case_med) / (ref_batch / ref_med) / world_size, CONFIDENCE)
    return Estimate(value=value, low=min(low, value), high=max(high, value))


TRIM = 0.2  # the paired ratio's trimmed mean drops this share of log ratios at each end


def paired_ratio_estimate(
    numerators: Sequence[float],
    denominators: Sequence[float],
    *,
    trim: float = TRIM,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> Estimate:
    """The typical ratio ``numerators[i] / denominators[i]`` of paired measurements: exp of the trimmed mean
    of the log ratios, with a bootstrap interval that resamples pairs (seeded: the same pairs, the same verdict).

    Parity's throughput ratio (harness/scalegate/parity.py): baseline step i / candidate step i, both steps run back to
    back in one launch. Logs, because a ratio and its inverse must be judged alike; a trimmed mean, because a
    stalled step makes one ratio far off, and the trimming drops it while the mean of the rest keeps more of
    the information than a median of a few pairs would.
    """
    if len(numerators) != len(denominators):
        raise ValueError(f"{len(numerators)} numerators but {len(denominators)} paired denominators")
    if not 0 <= trim < 0.5:
        raise ValueError(f"trim={trim} must be in [0, 0.5): the share of values dropped at each end")
    values = np.asarray([numerators, denominators], dtype=float)
    if not values.shape[1] or not (np.all(np.isfinite(values)) and np.all(values > 0)):
        raise ValueError("paired ratios need positive, finite values on both sides")
    logs = np.log(values[0]) - np.log(values[1])
    cut = int(trim * len(logs))  # as scipy.stats.trim_mean: whole values only, rounded down

    def trimmed(rows: np.ndarray) -> np.ndarray:
        ordered = np.sort(rows, axis=-1)
        return ordered[..., cut : ordered.shape[-1] - cut].mean(axis=-1)

    value = float(np.exp(trimmed(logs)))
    if len(logs) < MIN_VALUES:
        return Estimate(value=value, low=0.0, high=math.inf)
    picks = np.random.default_rng(seed).integers(0, len(logs), size=(resamples, len(logs)))
    low, high = _interval(np.exp(trimmed(logs[picks])), confidence)
    return Estimate(value=value, low=min(low, value), high=max(high, value))


def pooled_estimate(launches: Sequence[Estimate]) -> Estimate:
    """Several launches of one case judged together (``--scaling-launches``).

    The value is the launches' median. Its interval is that of a median of N launches: 1.96 standard
    errors, with the spread between launches as sigma (1.4826 MAD; the sample deviation below four
    launches, where a MAD is too coarse) and a median's 1.2533/sqrt(N) efficiency. It is never narrower
    than one launch's own interval shrunk by sqrt(N): launches that happen to agree still carry their
    steps' noise.
    """
    if len(launches) == 1:
        return launches[0]
    values = [e.value for e in launches]
    center = median(values)
    n = len(values)
    sigma = MAD_TO_SIGMA * mad(values) if n >= 4 else float(np.std(values, ddof=1))
    between = Z95 * MEDIAN_SE * sigma / math.sqrt(n) / center if center > 0 else math.inf
    within = median([e.half_width_rel for e in launches]) / math.sqrt(n)
    half = math.sqrt(between**2 + within**2)
    return Estimate(value=center, low=center * (1 - half), high=center * (1 + half))


def merge_launches(cases: list[dict]) -> dict:
    """Several launches of one case as one baseline: the median launch, its interval widened to the
    spread between launches (1.96 MAD-sigmas), which on a shared machine dwarfs the spread within one.
    ``cases`` are result-file dicts with ``efficiency`` and ``efficiency_ci``; the median one is returned."""
    ranked = sorted(cases, key=lambda c: c["efficiency"])
    middle = dict(ranked[(len(ranked) - 1) // 2])
    value = middle["efficiency"]
    if len(cases) < 2 or not value:
        return middle
    effs = [c["efficiency"] for c in cases]
    between = 1.96 * 1.4826 * mad(effs) / value
    own = middle.get("efficiency_ci") or [value, value]
    half = max(between, value - own[0], own[1] - value)
    middle["efficiency_ci"] = [value * (1 - half), value * (1 + half)]
    middle["launches"] = len(cases)
    return middle
