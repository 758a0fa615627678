"""E-divisive means (Matteson & James, 2014) with a permutation test: where a series of runs changed.

The method MongoDB's performance CI published (Daly et al., ICPE 2020) and Hunter/Apache Otava grew from:

1. For every split tau of a segment [a, b) into X = z[a:tau] and Y = z[tau:kappa], with kappa free in
   (tau, b], the energy statistic
   Q(tau, kappa) = |X||Y|/(|X|+|Y|) * (2 mean|X_i - Y_j| - mean_{i<k}|X_i - X_k| - mean_{j<k}|Y_j - Y_k|)
   (alpha = 1; the within-sample means are U-statistics, so each side needs >= 2 points). The candidate in the
   segment is the tau of the largest Q over both tau and kappa, as in the paper and its R package ``ecp``
   (``splitPointC`` loops over kappa). Only tau becomes a change point; kappa lets Y stop before a second
   change, so a regression fixed a few runs later (a dip) is found: with Y fixed at the segment's end the
   restored runs sit in Y beside the regressed ones, Y is half like X, and the test loses its power (20 runs
   with 3% noise and a 20% dip over runs 8-13: best p 0.025, no change point; with kappa free, 8 and 14).
   Apache Otava lifted the same restriction (commit a59a3cf). The statistic is nonparametric: it compares
   whole distributions, not only means, and assumes no noise model.
2. The best split over all current segments is the candidate. It is kept when a permutation test says it
   is significant: shuffle each segment's points, take the best Q again, and count how often chance does
   as well; p = (hits + 1) / (permutations + 1). Then the segments are split again, until nothing is.

Two choices made here, not in the paper: a minimum segment length (``min_size``, default 3), so one odd
run cannot become a change point on its own, and a fixed seed per series, so the same history always gives
the same verdict (a gate that flips on a rerun of the same data is worse than useless).

Why not the library: PyPI ``signal-processing-algorithms`` (MongoDB's) needs numpy < 2, setuptools < 71,
gevent and Python 3.11 only, and builds a C extension from its sdist; ``apache-otava`` pins numpy 2.2.0
exactly and pulls BigQuery, Postgres and Slack clients. Neither installs next to our pinned torch stack
without moving numpy, so the lines below are the algorithm, tested in tests/test_history_changepoint.py.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

DEFAULT_PVALUE = 0.01
DEFAULT_PERMUTATIONS = 199
DEFAULT_MIN_SIZE = 3


@dataclass(frozen=True, kw_only=True)
class ChangePoint:
    index: int  # the first point of the new regime
    pvalue: float
    statistic: float


def _weights(n: int, min_size: int) -> tuple[np.ndarray, ...]:
    """Q = between * a + within_x * b + s_kk * c + pen on the (tau, kappa) grid; pen is -inf off the valid part."""
    t = np.arange(n + 1, dtype=float)[:, None]
    m = np.arange(n + 1, dtype=float)[None, :] - t  # |Y| = kappa - tau
    ok = (t >= max(min_size, 2)) & (m >= max(min_size, 2))
    t, m = np.where(ok, t, 2.0), np.where(ok, m, 2.0)  # any value > 1 off the grid: no division by zero
    w = t * m / (t + m)
    a = 2 * w * (1 / (t * m) + 1 / (m * (m - 1)))
    b = w * (1 / (m * (m - 1)) - 1 / (t * (t - 1)))
    c = -w / (m * (m - 1))
    return a, b, c, np.where(ok, 0.0, -np.inf)


def _q_values(z: np.ndarray, min_size: int) -> np.ndarray:
    """max over kappa of Q(tau, kappa) for every split tau of each row of ``z`` (shape (k, n)) -> (k, n + 1);
    -inf where no kappa leaves both sides ``min_size`` long.

    With S[i, j] = sum of |z_p - z_q| over p < i, q < j (so S is symmetric): the pairs within X sum to
    S[tau, tau] (each twice), between X and Y to S[tau, kappa] - S[tau, tau], within Y to
    S[kappa, kappa] - 2 S[tau, kappa] + S[tau, tau] (each twice), which Q weighs linearly."""
    k, n = z.shape
    a, b, c, pen = _weights(n, min_size)
    s = np.zeros((k, n + 1, n + 1))
    d = np.abs(z[:, :, None] - z[:, None, :])
    np.cumsum(d, axis=1, out=d)
    np.cumsum(d, axis=2, out=s[:, 1:, 1:])
    del d
    i = np.arange(n + 1)
    diag = s[:, i, i]
    s -= diag[:, :, None]  # between X and Y
    s *= a
    s += diag[:, :, None] * b
    s += diag[:, None, :] * c
    s += pen
    return s.max(2)


def _best(z: np.ndarray, bounds: list[tuple[int, int]], min_size: int) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``z`` (shape (k, n)): the best split over all segments, and its Q."""
    best_index = np.full(len(z), -1)
    best_q = np.full(len(z), -np.inf)
    for a, b in bounds:
        q = _q_values(z[:, a:b], min_size)
        i = q.argmax(1)
        top = q[np.arange(len(z)), i]
        better = top > best_q
        best_index[better], best_q[better] = a + i[better], top[better]
    return best_index, best_q


def seed_for(name: str) -> int:
    """A stable seed per series (Python's hash() is salted per process)."""
    return zlib.crc32(name.encode())


def e_divisive(
    values,
    *,
    pvalue: float = DEFAULT_PVALUE,
    permutations: int = DEFAULT_PERMUTATIONS,
    min_size: int = DEFAULT_MIN_SIZE,
    seed: int = 0,
) -> list[ChangePoint]:
    """Significant change points of ``values``, sorted by index (each index starts a new regime)."""
    z = np.asarray(values, dtype=float)
    if z.ndim != 1 or not np.all(np.isfinite(z)):
        raise ValueError("e_divisive needs a one-dimensional series of finite numbers")
    rng = np.random.default_rng(seed)
    found: list[ChangePoint] = []
    while True:
        edges = [0] + sorted(c.index for c in found) + [len(z)]
        bounds = list(zip(edges[:-1], edges[1:]))
        top_index, top_q = _best(z[None], bounds, min_size)
        index, q = int(top_index[0]), float(top_q[0])
        if index < 0 or q <= 0:
            break
        shuffled = np.tile(z, (permutations, 1))
        for a, b in bounds:  # permute within segments: the change points found so far stay where they are
            shuffled[:, a:b] = rng.permuted(shuffled[:, a:b], axis=1)
        hits = int((_best(shuffled, bounds, min_size)[1] >= q).sum())
        p = (hits + 1) / (permutations + 1)
        if p > pvalue:
            break
        found.append(ChangePoint(index=index, pvalue=p, statistic=q))
    return sorted(found, key=lambda c: c.index)
