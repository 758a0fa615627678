"""E-divisive's energy statistic Q(tau, kappa) for every split of a series at once, and of many shuffles at once.

For X = z[0:tau] and Y = z[tau:kappa] (changepoint.py has the statistic and why kappa is free):
Q = |X||Y|/(|X|+|Y|) * (2 mean|X_i - Y_j| - mean_{i<k}|X_i - X_k| - mean_{j<k}|Y_j - Y_k|). With
S[i, j] = sum of |z_p - z_q| over p < i, q < j (S is symmetric): the pairs within X sum to S[tau, tau] (each twice),
between X and Y to S[tau, kappa] - S[tau, tau], within Y to S[kappa, kappa] - 2 S[tau, kappa] + S[tau, tau] (each
twice), which Q weighs linearly: one (n + 1, n + 1) grid per series, two running sums of the distances.

A permutation test asks this of thousands of shuffles, so ``Tops`` lays a block of them out shuffle-last
(``(n + 1, n + 1, shuffles)``): each running sum is then n additions of whole contiguous planes (numpy's cumsum
along an axis is a scalar loop over every cell), every step works in buffers made once per block size and test, and
only the valid triangle (kappa at least ``min_size`` after tau) is weighed. The arithmetic is ``grid``'s, step for
step: the same Q to the bit.

A test only asks whether a shuffle's best Q reaches the candidate's, so ``exceed`` runs that kernel in float32
(``Rough``: half the bytes each step moves, about twice as fast), which reports each top with a bound on its error,
and computes again with ``grid`` only the shuffles whose top lies within its bound of the candidate's Q (under 1%
of them in a history of 1,000 runs x 300 series): the count of hits is the float64 kernels' count.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

BANDS = 3  # Tops weighs the valid triangle in this many rectangles, not the whole square


@functools.lru_cache(maxsize=64)
def weights(n: int, min_size: int) -> tuple[np.ndarray, ...]:
    """Q = between * a + within_x * b + s_kk * c on the (tau, kappa) grid, 0 off its valid part (a side shorter than
    ``min_size``); pen is 0 on it and -inf off it. Kept per (n, min_size): every block of shuffles uses the same."""
    t = np.arange(n + 1, dtype=float)[:, None]
    m = np.arange(n + 1, dtype=float)[None, :] - t  # |Y| = kappa - tau
    ok = (t >= max(min_size, 2)) & (m >= max(min_size, 2))
    t, m = np.where(ok, t, 2.0), np.where(ok, m, 2.0)  # any value > 1 off the grid: no division by zero
    w = t * m / (t + m)
    a = 2 * w * (1 / (t * m) + 1 / (m * (m - 1)))
    b = w * (1 / (m * (m - 1)) - 1 / (t * (t - 1)))
    c = -w / (m * (m - 1))
    found = tuple(np.where(ok, x, 0.0) for x in (a, b, c)) + (np.where(ok, 0.0, -np.inf),)
    for x in found:
        x.setflags(write=False)
    return found


def grid(z: np.ndarray, min_size: int) -> np.ndarray:
    """Q(tau, kappa) for each row of ``z`` (shape (k, n)) -> (k, n + 1, n + 1); 0 off the valid part."""
    k, n = z.shape
    a, b, c, _ = weights(n, min_size)
    s = np.zeros((k, n + 1, n + 1))
    d = np.abs(z[:, :, None] - z[:, None, :])
    np.cumsum(d, axis=1, out=d)
    np.cumsum(d, axis=2, out=s[:, 1:, 1:])
    i = np.arange(n + 1)
    diag = s[:, i, i]
    s -= diag[:, :, None]  # between X and Y
    s *= a
    s += diag[:, :, None] * b
    s += diag[:, None, :] * c
    return s


def q_values(z: np.ndarray, min_size: int) -> np.ndarray:
    """max over kappa of Q(tau, kappa) for every split tau of each row of ``z`` (shape (k, n)) -> (k, n + 1);
    -inf where no kappa leaves both sides ``min_size`` long."""
    s = grid(z, min_size)
    s += weights(z.shape[1], min_size)[3]
    return s.max(2)


class Tops:
    """The largest Q of each of ``rows`` series of ``n`` runs, in buffers kept between blocks."""

    def __init__(self, n: int, rows: int, min_size: int, dtype: type = np.float64) -> None:
        self.s = np.zeros((n + 1, n + 1, rows), dtype=dtype)
        self.tmp = np.empty((n + 1, n + 1, rows), dtype=dtype)
        self.i = np.arange(n + 1)
        side = max(min_size, 2)
        edges = np.linspace(side, n - side + 1, BANDS + 1).astype(int)
        # the valid part is a triangle (kappa >= tau + side): bands of tau, each from its first valid kappa on
        self.bands = [(t0, t1, t0 + side) for t0, t1 in zip(edges[:-1], edges[1:]) if t1 > t0]
        # each band's weights a, b, c as (tau, kappa) planes: einsum broadcasts them over the shuffles in one pass
        abc = weights(n, min_size)[:3]
        self.planes = [tuple(w[t0:t1, k0:].astype(dtype) for w in abc) for t0, t1, k0 in self.bands]

    def __call__(self, z: np.ndarray) -> np.ndarray:
        """For each row of ``z`` (shape (rows, n)): its largest Q, or 0 where none is larger."""
        k, n = z.shape
        s, tmp = self.s, self.tmp
        zt = np.ascontiguousarray(z.T)
        d = s[1:, 1:]
        for p in range(n):  # S, summed in numpy's cumsum order (runs p, then q); each |z_p - z_q| plane made in cache
            row = d[p]
            np.subtract(zt, zt[p], out=row)
            np.abs(row, out=row)
            if p:
                np.add(d[p - 1], row, out=row)
        for q in range(1, n):
            np.add(d[:, q - 1], d[:, q], out=d[:, q])
        diag = s[self.i, self.i]
        self.total = diag[n]  # S[n, n]: every pair's distance, twice
        top = np.zeros(k)
        for (t0, t1, k0), (a, b, c) in zip(self.bands, self.planes):
            band, spare = s[t0:t1, k0:], tmp[t0:t1, k0:]
            for t in range(t0, t1):  # between X and Y; a plane a tau keeps numpy's loop contiguous
                np.subtract(s[t, k0:], diag[t], out=s[t, k0:])
            np.einsum("tk,tkr->tkr", a, band, out=spare)
            np.einsum("tk,tr->tkr", b, diag[t0:t1], out=band)
            spare += band
            np.einsum("tk,kr->tkr", c, diag[k0:], out=band)
            spare += band
            np.maximum(top, spare.max(axis=(0, 1)), out=top)
        return top


UNIT = 2.0**-24  # float32's unit roundoff
SAFETY = 2.0  # Rough's bound is this many times what the analysis below gives


@functools.lru_cache(maxsize=64)
def spread(n: int, min_size: int) -> float:
    """The largest 2|a| + |b| + |c| on the valid grid: how much an error in S moves Q at most."""
    a, b, c, _ = weights(n, min_size)
    return float((2 * np.abs(a) + np.abs(b) + np.abs(c)).max())


class Rough(Tops):
    """``Tops`` in float32 (half the bytes a step moves: about twice as fast), each row's top with a bound on its
    error, so that only a top within its bound of the candidate's Q needs the exact kernel.

    The bound, for a row of ``n`` runs with range R, centred first (Q depends only on differences) so that each
    value is within R/2 of 0: rounding the values to float32 and subtracting them puts each distance off by at most
    delta = 2.5 u R (u = 2^-24); each S[i, j] adds at most 2n of them one after another, so it is off by at most
    2n u S + n^2 delta, with S <= S[n, n] + n^2 delta over 1 - 2n u (S[n, n] as summed here); Q weighs S with
    a, b and c, each rounded, in five more roundings, so it is off by at most ``spread`` (2n u S + n^2 delta) + 5 u
    (|a| + |b| + |c|) S. ``SAFETY`` times that is the bound (tests/test_history_changepoint.py shows the tops within
    half of it, at every scale)."""

    def __init__(self, n: int, rows: int, min_size: int) -> None:
        super().__init__(n, rows, min_size, dtype=np.float32)
        self.n, self.weight = n, spread(n, min_size)

    def __call__(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[override]
        """For each row of ``z`` (shape (rows, n)): its largest Q (or 0) in float32, and the bound on its error."""
        low, high = z.min(1), z.max(1)
        top = super().__call__((z - ((low + high) / 2)[:, None]).astype(np.float32))
        n, u = self.n, UNIT
        delta = 2.5 * u * (high - low)
        s = (self.total.astype(float) + n * n * delta) / (1 - 2.02 * n * u)
        err = SAFETY * self.weight * ((2.02 * n + 5) * u * s + n * n * delta) * 1.01
        return top, err


WIDE = 1500  # cells of a plane (n + 1 runs x rows) from which the shuffle-last layout pays for its 2n steps a block


def wide(n: int, rows: int) -> bool:
    """Whether ``rows`` series of ``n`` runs go through ``Rough`` (else ``grid``): its planes are large enough that
    numpy's work on each outweighs the call (measured: at n = 100, 16 rows 1.25 times as fast as ``grid``, 8 rows
    0.8 times; at n = 365, 15 rows 6 times)."""
    return (n + 1) * rows >= WIDE


UNSURE = 0.25  # a test whose float32 block leaves more of its rows than this within their bound goes on in float64


@dataclass
class Kernels:
    """One test's kernels, their buffers living as long as the test: ``Rough`` ones by (n, rows); once a block has
    left more than ``UNSURE`` of its rows within their bound, ``float64`` and ``Tops`` ones instead."""

    rough: dict[tuple[int, int], Rough] = field(default_factory=dict)
    exact: dict[tuple[int, int], Tops] = field(default_factory=dict)
    float64: bool = False


def exceed(z: np.ndarray, min_size: int, q: float, kernels: Kernels) -> np.ndarray:
    """For each row of ``z`` (shape (k, n)): whether its largest Q is at least ``q`` (> 0), as ``grid`` computes Q.
    Where ``wide``, in float32 (``Rough``), a row whose top lies within its error bound of ``q`` computed again by
    ``grid``; where that leaves more than ``UNSURE`` of a block's rows (a candidate among the shuffles' own tops, at
    a length where the bound is wide), the block and the rest of its test go through ``Tops`` in float64."""
    k, n = z.shape
    if not wide(n, k):
        return grid(z, min_size).reshape(k, -1).max(1) >= q
    if not kernels.float64:
        if (n, k) not in kernels.rough:
            kernels.rough[n, k] = Rough(n, k, min_size)
        top, err = kernels.rough[n, k](z)
        out = top - err >= q
        unsure = (top + err >= q) & ~out
        if unsure.mean() <= UNSURE:
            if unsure.any():
                out[unsure] = grid(z[unsure], min_size).reshape(int(unsure.sum()), -1).max(1) >= q
            return out
        kernels.float64 = True
        kernels.rough.clear()  # their buffers, before the float64 kernel's
    if (n, k) not in kernels.exact:
        kernels.exact[n, k] = Tops(n, k, min_size)
    return kernels.exact[n, k](z) >= q
