"""Scaling arithmetic with the definitions of docs/concepts.md, in one place."""

from __future__ import annotations

import math
import statistics
from typing import Sequence

MAD_TO_SIGMA = 1.4826  # MAD of a normal sample times this estimates its standard deviation
MEDIAN_SE = 1.2533  # standard error of a median = this * sigma / sqrt(n) for a normal sample
Z95 = 1.96


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation: a spread that one slow outlier step cannot inflate."""
    center = median(values)
    return median([abs(v - center) for v in values])


def median_noise_rel(values: Sequence[float]) -> float:
    """Relative half-width of an approximate 95% interval for the median of ``values``."""
    center = median(values)
    if center <= 0 or len(values) < 2:
        return 0.0
    sigma = MAD_TO_SIGMA * mad(values)
    return Z95 * MEDIAN_SE * sigma / math.sqrt(len(values)) / center


def throughput(global_batch: int, step_s: float) -> float:
    """Samples per second: the global batch divided by the median step time."""
    if step_s <= 0:
        raise ValueError(f"step time must be positive, got {step_s}")
    return global_batch / step_s


def speedup(case_throughput: float, reference_throughput: float) -> float:
    """Throughput of the case over the single-process 1x1 throughput of the same model and preset."""
    if reference_throughput <= 0:
        raise ValueError(f"reference throughput must be positive, got {reference_throughput}")
    return case_throughput / reference_throughput


def efficiency(speedup_value: float, world_size: int) -> float:
    """Speedup divided by the number of devices; 1.0 is ideal."""
    if world_size < 1:
        raise ValueError(f"world size must be >= 1, got {world_size}")
    return speedup_value / world_size
