"""When a permutation test has drawn enough shuffles: the verdict at the level is settled, or the cap is reached.

A permutation test estimates its p-value from shuffles, p = (hits + 1) / (drawn + 1). With a fixed count the
verdict at the level is decided by a handful of hits when the true p is near it: at 199 shuffles and p <= 0.01,
one hit more or less, so the same borderline change came and went from night to night. A fixed 999 only moves
the coin flip closer to the level. Here shuffles are drawn in blocks until the verdict is settled:

- after ``drawn`` shuffles with ``hits`` at least as extreme as the data, the candidate is *significant* once
  P(Binomial(drawn, level) <= hits) < ``risk`` (so few hits that a true p at the level would rarely give them),
  and *not significant* once P(Binomial(drawn, level) >= hits) < ``risk``;
- otherwise the draws go on, up to the cap, where the estimate decides.

So a candidate far from the level stops early (true p = 0.5: after the first block of 100; p near 0: after
about 700 shuffles at level 0.01 and risk 0.001), and only a candidate near the level draws the full cap. The
test is the idea of Gandy (JASA 2009, "Sequential implementation of Monte Carlo tests with uniformly bounded
resampling risk") with a simpler boundary: the risk is bounded per look, not uniformly over all of them, which
matters only when the true p is at the level itself, where either verdict is as right as the other.

A test at a level far below 0.01 (a window of a long series, ``windows.py``) would need thousands of shuffles to
settle even a clear change (about 7 / level at risk 0.001). There the shuffles are curtailed instead (Besag & Clifford,
Biometrika 1991): a fixed number, ``fewest(level, hits)``, the fewest whose p = (hits + 1) / (shuffles + 1) can reach
the level with ``hits`` of them at least as extreme, stopped as soon as more than ``hits`` are, after which no verdict
but "not significant" is left. The p it gives is exact for that number of shuffles, so the test keeps its level; a
clear change costs (hits + 1) / level shuffles, a hopeless candidate a handful.
"""

from __future__ import annotations

import math

DEFAULT_RISK = 1e-3


def _log_pmf(k: int, n: int, p: float) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p) + (n - k) * math.log1p(-p)


def at_most(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) <= k), summed term by term (k stays small: a few hundred hits at most)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return min(1.0, sum(math.exp(_log_pmf(i, n, p)) for i in range(k + 1)))


def settled(hits: int, drawn: int, level: float, risk: float = DEFAULT_RISK) -> bool:
    """Whether ``hits`` among ``drawn`` shuffles already decide p <= ``level`` either way, at ``risk`` (0: never,
    a test with a fixed number of shuffles)."""
    if not 0 < level < 1 or not 0 <= risk < 1:
        raise ValueError(
            f"level {level} must be in (0, 1) and risk {risk} in [0, 1)\nHINT: e.g. level 0.01 (--pvalue), risk 0.001"
        )
    if drawn == 0 or risk == 0:
        return False
    below = at_most(hits, drawn, level)  # this few hits, were p at the level: significant
    above = 1.0 - at_most(hits - 1, drawn, level)  # this many: not significant
    return below < risk or above < risk


def fewest(level: float, hits: int = 0) -> int:
    """The fewest shuffles whose p = (hits + 1) / (shuffles + 1) can be at most ``level`` with ``hits`` of them at
    least as extreme: 99 at 0.01 with none, 299 with two."""
    if not 0 < level < 1 or hits < 0:
        raise ValueError(f"level {level} must be in (0, 1), hits {hits} >= 0\nHINT: e.g. level 0.01 (--pvalue)")
    return max(1, math.ceil((hits + 1) / level - 1e-9) - 1)


def within(p: float, level: float) -> bool:
    """p <= level, give or take the rounding of a level divided by a count (0.01 / 19 against 1 / 1,900)."""
    return p <= level * (1 + 1e-9)
