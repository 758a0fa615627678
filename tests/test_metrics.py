"""Scaling arithmetic and the efficiency verdict, including hypothesis properties."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalegate.contract import metrics
from scalegate.figures.stats import Estimate, pooled_estimate
from scalegate.judge.metric import IMPROVED, NO_BASELINE, NOISY, REGRESSED, higher_is_better
from scalegate.record.baselines import Reference

pos = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False)


def judge_efficiency(value, noise, reference, where):
    """The session's verdict for an efficiency measured with a symmetric relative interval ±noise."""
    return higher_is_better(Estimate(value=value, low=value * (1 - noise), high=value * (1 + noise)), reference, where)


def test_definitions():
    assert metrics.throughput(64, 0.5) == 128
    assert metrics.speedup(150, 100) == 1.5
    assert metrics.efficiency(1.5, 2) == 0.75
    assert metrics.median([3, 1, 2, 100]) == 2.5
    assert metrics.mad([1, 2, 3, 4, 100]) == 1


@given(pos, pos, st.integers(1, 1024))
def test_efficiency_is_speedup_over_world(case, ref, world):
    eff = metrics.efficiency(metrics.speedup(case, ref), world)
    assert math.isclose(eff * world * ref, case, rel_tol=1e-9)


@given(st.lists(pos, min_size=2, max_size=50))
def test_noise_is_scale_free_and_nonnegative(values):
    a = metrics.median_noise_rel(values)
    b = metrics.median_noise_rel([v * 7 for v in values])
    assert a >= 0 and math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


@given(base=st.floats(0.05, 1.5), tol=st.floats(0.01, 0.5), ratio=st.floats(0.01, 3.0), noise=st.floats(0, 0.2))
def test_inside_tolerance_never_fails_outside_beyond_noise_always_does(base, tol, ratio, noise):
    value = base * ratio
    verdict = judge_efficiency(value, noise, Reference(value=base, tolerance=tol), "case on profile")
    low = base * (1 - tol)
    if value >= low:
        assert verdict.status != REGRESSED
    if value * (1 + noise) < low:
        assert verdict.status == REGRESSED
        assert f"below baseline {base:.3f}" in verdict.message
    if verdict.status == IMPROVED:
        assert value > base * (1 + tol)


def test_regression_message_reads_like_the_style_guide():
    verdict = judge_efficiency(0.71, 0.02, Reference(value=0.80, tolerance=0.05), "fsdp-cnn-1x2:tiny on cpu-2c")
    assert verdict.status == REGRESSED
    assert verdict.message == (
        "efficiency 0.710 is below baseline 0.800 (tolerance 5%, noise ±2.0%) [fsdp-cnn-1x2:tiny on cpu-2c]"
    )


def test_noise_band_protects_a_borderline_drop():
    # 0.74 is below 0.8 * 0.95 = 0.76, but within a 5% noise band of it: not a regression, a rerun.
    verdict = judge_efficiency(0.74, 0.05, Reference(value=0.8, tolerance=0.05), "x")
    assert verdict.status == NOISY and "rerun to confirm" in verdict.message


def test_no_baseline_says_so():
    verdict = judge_efficiency(0.7, 0.0, None, "ddp-cnn-1x2:tiny on cpu-x")
    assert verdict.status == NO_BASELINE and verdict.message == "no baseline for ddp-cnn-1x2:tiny on cpu-x"


def test_launches_judged_together_take_the_median_and_the_spread_between_them():
    one = Estimate(value=0.6, low=0.58, high=0.62)
    assert pooled_estimate([one]) is one
    pooled = pooled_estimate([Estimate(value=v, low=v * 0.99, high=v * 1.01) for v in (0.50, 0.60, 0.70)])
    assert pooled.value == pytest.approx(0.60)
    # sample sigma 0.1 over 3 launches: 1.96 * 1.2533 * 0.1 / sqrt(3) / 0.6 = 23.6% (plus 1%/sqrt(3) within)
    assert pooled.half_width_rel == pytest.approx(0.2365, abs=0.002)
    agreeing = pooled_estimate([Estimate(value=0.6, low=0.54, high=0.66)] * 4)
    assert agreeing.half_width_rel == pytest.approx(0.10 / 2)  # never tighter than the steps' own noise / sqrt(N)


def test_paired_ratio_is_the_trimmed_geometric_mean_of_the_pairs_with_a_seeded_interval():
    from scalegate.figures.stats import paired_ratio_estimate

    # every pair 2:1 while the machine's phase moves both halves: the ratio is exact, the interval a point
    phase = [1.0, 1.3, 0.9, 1.6, 1.1, 1.0, 1.2, 0.95]
    exact = paired_ratio_estimate([2 * p for p in phase], phase)
    assert (exact.value, exact.low, exact.high) == pytest.approx((2.0, 2.0, 2.0))
    # ten pairs, 20% trimmed: the lowest and highest log ratio go (a stall of 5x among them), the mean of the rest stays
    ratios = [0.9, 1.0, 1.1, 1.0, 0.95, 1.05, 1.0, 1.0, 0.2, 5.0]
    trimmed = paired_ratio_estimate(ratios, [1.0] * 10)
    kept = sorted(ratios)[2:8]
    assert trimmed.value == pytest.approx(math.exp(sum(math.log(r) for r in kept) / len(kept)))
    assert trimmed.low <= trimmed.value <= trimmed.high
    assert paired_ratio_estimate(ratios, [1.0] * 10) == trimmed  # seeded: the same pairs, the same interval
    # a ratio and its inverse are judged alike
    inverse = paired_ratio_estimate([1.0] * 10, ratios)
    assert inverse.value == pytest.approx(1 / trimmed.value)
    assert (inverse.low, inverse.high) == pytest.approx((1 / trimmed.high, 1 / trimmed.low), rel=0.05)
    # too few pairs bound nothing; mismatched or non-positive series are refused
    two = paired_ratio_estimate([2.0, 2.0], [1.0, 1.0])
    assert (two.value, two.low, two.high) == (2.0, 0.0, math.inf)
    with pytest.raises(ValueError, match="3 numerators but 2 paired denominators"):
        paired_ratio_estimate([1.0] * 3, [1.0] * 2)
    with pytest.raises(ValueError, match="positive, finite"):
        paired_ratio_estimate([1.0, 0.0, 1.0], [1.0] * 3)
