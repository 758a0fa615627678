"""Where a long history may have changed: Apache Otava's split and merge, with two things the suite adds.

Otava (``apache-otava``, the extra ``changepoint``) finds change points as Hunter does (Fleming et al., ICPE 2023):
E-divisive's energy statistic with the end of the second sample free, searched in overlapping windows of
``WINDOW`` runs (the split step), each window's best split kept while a Student's t-test between its two sides gives
``p <= 10 x level``; then the weak points are merged away, weakest first, until every one left has ``p <= level``
between its neighbours (the merge step). No shuffles: a series of 1,000 runs takes milliseconds.

What the suite adds, through the library's own extension points (a ``Calculator`` and a ``SignificanceTester``
given to its ``ChangePointDetector``; Otava's ``split`` names its calculator inline, so its loop is repeated here):

- no split leaves either side shorter than ``min_size`` runs (``Calculator``), so one odd night is never a segment:
  Otava as shipped cuts a spike out as a segment of one or two runs;
- a window's new split is t-tested between X and Y up to the kappa that gave the best Q (``Tester``), as the
  whole-series test measures it: Otava's compares Y to the window's end, where a regression fixed a few runs later
  sits beside the restored runs, and in a long history it missed such a dip at one end or both in half the tries;
- the calculator's Q is the suite's grid (energy.py), the same statistic as Otava's in one vectorised pass, and the
  t-test's p comes from scipy's Student's t function directly, not through ``scipy.stats``' per-call checks, which
  cost more than the rest of a window's search; the candidates are the same (tests/test_history_otava.py compares
  both with Otava's own).

The t-test does not know that its split was the best of many, so on noise it finds change points far more often
than its level says (docs/evidence/history.md). Here its points only say whether a long series is tested at all, at
a strict level (``LEVEL``): changepoint.find then tests it with the permutation test.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from typing import Sequence

import numpy as np

from scalegate.history import energy

EXTRA = "changepoint"  # pip install 'scalegate[changepoint]': the pinned apache-otava
WINDOW = 50  # runs per window of the split step: Otava's compute_change_points default
LEVEL = 1e-4  # the merge step's level (Otava's default 0.001); the split step uses ten times it


@functools.cache
def available() -> bool:
    """Whether Otava is installed (the extra ``changepoint``), found without importing it: its import (scipy's
    statistics) costs half a second a process, paid where a series is searched, not where a hint is printed."""
    return importlib.util.find_spec("otava") is not None


def prepare() -> None:
    """Import Otava (and scipy's statistics with it) now: a worker process that will search long series pays the
    import while its parent still reads the store, not when its first series arrives."""
    if available():
        import otava.analysis  # noqa: F401


@functools.cache
def _parts(min_size: int, level: float):
    """Otava's calculator and t-test, each with what the suite adds (see the module's docstring)."""
    from otava.analysis import TTestSignificanceTester, TTestStats
    from otava.change_point_divisive.base import CandidateChangePoint, ChangePoint
    from otava.change_point_divisive.calculator import PairDistanceCalculator
    from scipy.special import stdtr

    @dataclasses.dataclass
    class Candidate(CandidateChangePoint):
        kappa: int  # the end of Y that gave the best Q

    class Calculator(PairDistanceCalculator):
        """Otava's Q without the splits whose sides are shorter than ``min_size``, from the suite's grid (energy.py:
        the same statistic in one vectorised pass); its candidate says its kappa."""

        def get_candidate_change_point(self, interval: slice) -> Candidate:
            start = interval.start or 0
            end = len(self.series) if interval.stop is None else interval.stop
            q = energy.grid(np.asarray(self.series[start:end], dtype=float)[None], min_size)[0]
            q += energy.weights(end - start, min_size)[3]  # q[tau - start, kappa - start]; -inf off the grid
            tau, kappa = np.unravel_index(np.argmax(q), q.shape)
            return Candidate(index=int(start + tau), qhat=float(q[tau, kappa]), kappa=int(start + kappa))

        def get_next_candidate(self, intervals):
            long = [i for i in intervals if (i.stop or len(self.series)) - (i.start or 0) >= 2 * min_size]
            found = super().get_next_candidate(long)
            return found if found is not None and np.isfinite(found.qhat) else None

    class Tester(TTestSignificanceTester):
        """A new split compares X with Y up to its kappa (Otava's compares Y to the window's end, where a regression
        fixed a few runs later hides itself); the merge step's comparisons are Otava's. Its t-test is Otava's
        (pooled variance, two-sided), its p from scipy's Student's t function directly: scipy.stats' per-call
        checks cost more than the rest of a window's search."""

        def compare(self, left, right) -> TTestStats:
            n1, n2 = len(left), len(right)
            if not n1 or not n2:
                raise ValueError("a t-test needs both sides")
            (m1, s1), (m2, s2) = _moments(left), _moments(right)
            p = 1.0
            if n1 + n2 > 2:
                df = n1 + n2 - 2
                pooled = ((n1 - 1) * s1 * s1 + (n2 - 1) * s2 * s2) / df
                with np.errstate(divide="ignore", invalid="ignore"):
                    t = np.float64(m1 - m2) / np.sqrt(pooled * (1.0 / n1 + 1.0 / n2))
                p = float(2 * stdtr(df, -abs(t)))
            return TTestStats(mean_1=m1, mean_2=m2, std_1=s1, std_2=s2, pvalue=p)

        def change_point(self, candidate, series, intervals):
            if isinstance(candidate, Candidate):
                inside = [i for i in intervals if (i.start or 0) < candidate.index < (i.stop or len(series))]
                if inside:
                    left = series[inside[0].start or 0 : candidate.index]
                    return ChangePoint.from_candidate(
                        candidate, self.compare(left, series[candidate.index : candidate.kappa])
                    )
            return super().change_point(candidate, series, intervals)

    return Calculator, Tester(level)


def _moments(x) -> tuple[float, float]:
    """np.mean(x) and np.std(x) (0 for one value), the same arithmetic to the bit without their wrappers' checks,
    which cost more than the sums on a window's few runs."""
    x = np.asarray(x, dtype=float)
    mean = x.sum() / len(x)
    if len(x) < 2:
        return mean, 0.0
    d = x - mean
    return mean, np.sqrt(np.multiply(d, d, out=d).sum() / len(x))


def _split(series: list[float], min_size: int, level: float) -> list:
    """Otava's split step (``otava.analysis.split``) with the minimum segment length: each window's change points
    at ``level``, windows of ``WINDOW`` runs, each starting half a window on or at the last point found."""
    from otava.change_point_divisive.detector import ChangePointDetector

    calculator, tester = _parts(min_size, level)
    found: list = []
    start = 0
    while start < len(series):
        end = min(start + WINDOW, len(series))
        new = ChangePointDetector(significance_tester=tester, calculator=calculator).get_change_points(
            series, start, end
        )
        start = max(new[-1].index if new else 0, start + WINDOW // 2)
        found += [c for c in new if c not in found]
    found.sort(key=lambda c: c.index)
    intervals = tester.get_intervals(found)  # the weak points' stats between their neighbours, as Otava's split ends
    return [tester.change_point(c.to_candidate(), series, intervals) for c in found]


def candidates(values: Sequence[float], *, min_size: int, level: float = LEVEL) -> list[int]:
    """Otava's change points of ``values`` (split, then merge, at ``level``), each side at least ``min_size`` runs:
    the first run of each new regime, sorted. Raises ImportError without the extra ``changepoint``."""
    from otava.analysis import merge

    series = [float(v) for v in values]
    weak = _split(series, min_size, level * 10 if level < 0.05 else level)
    return sorted(int(c.index) for c in merge(weak, series, level, 0.0))
