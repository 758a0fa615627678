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
  sits beside the restored runs, and in a long history it missed such a dip at one end or both in half the tries.

The t-test does not know that its split was the best of many, so on noise it finds change points far more often
than its level says (docs/evidence/history.md). Here its points are only candidates, at a strict level
(``LEVEL``): changepoint.find judges each with the permutation test.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import numpy as np

EXTRA = "changepoint"  # pip install 'scalegate[changepoint]': the pinned apache-otava
WINDOW = 50  # runs per window of the split step: Otava's compute_change_points default
LEVEL = 1e-4  # the merge step's level (Otava's default 0.001); the split step uses ten times it


@functools.cache
def available() -> bool:
    """Whether Otava is installed (the extra ``changepoint``)."""
    try:
        import otava.analysis  # noqa: F401
    except ImportError:
        return False
    return True


def _parts(min_size: int, level: float):
    """Otava's calculator and t-test, each with what the suite adds (see the module's docstring)."""
    from otava.analysis import TTestSignificanceTester
    from otava.change_point_divisive.base import CandidateChangePoint, ChangePoint
    from otava.change_point_divisive.calculator import PairDistanceCalculator

    @dataclasses.dataclass
    class Candidate(CandidateChangePoint):
        kappa: int  # the end of Y that gave the best Q

    class Calculator(PairDistanceCalculator):
        """Otava's Q grid without the splits whose sides are shorter than ``min_size``; its candidate says its kappa."""

        def get_candidate_change_point(self, interval: slice) -> Candidate:
            start = interval.start or 0
            end = len(self.series) if interval.stop is None else interval.stop
            q = self._get_Q_vals(start, end)  # q[i, j] = Q(tau = start + i + 1, kappa = start + j + 2)
            taus = np.arange(start + 1, end)[:, None]
            kappas = np.arange(start + 2, end + 1)[None, :]
            q = np.where((taus - start >= min_size) & (kappas - taus >= min_size), q, -np.inf)
            i, j = np.unravel_index(np.argmax(q), q.shape)
            return Candidate(index=int(start + i + 1), qhat=float(q[i, j]), kappa=int(start + j + 2))

        def get_next_candidate(self, intervals):
            long = [i for i in intervals if (i.stop or len(self.series)) - (i.start or 0) >= 2 * min_size]
            found = super().get_next_candidate(long)
            return found if found is not None and np.isfinite(found.qhat) else None

    class Tester(TTestSignificanceTester):
        """A new split compares X with Y up to its kappa (Otava's compares Y to the window's end, where a regression
        fixed a few runs later hides itself); the merge step's comparisons are Otava's."""

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


def _split(series: list[float], min_size: int, level: float) -> list:
    """Otava's split step (``otava.analysis.split``) with the minimum segment length: each window's change points
    at ``level``, windows of ``WINDOW`` runs, each starting half a window on or at the last point found."""
    from otava.analysis import TTestSignificanceTester
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
    merging = TTestSignificanceTester(level)  # the weak points' stats between their neighbours, as Otava's split ends
    intervals = merging.get_intervals(found)
    return [merging.change_point(c.to_candidate(), series, intervals) for c in found]


def candidates(values: Sequence[float], *, min_size: int, level: float = LEVEL) -> list[int]:
    """Otava's change points of ``values`` (split, then merge, at ``level``), each side at least ``min_size`` runs:
    the first run of each new regime, sorted. Raises ImportError without the extra ``changepoint``."""
    from otava.analysis import merge

    series = [float(v) for v in values]
    weak = _split(series, min_size, level * 10 if level < 0.05 else level)
    return sorted(int(c.index) for c in merge(weak, series, level, 0.0))
