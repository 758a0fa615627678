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
   as well; p = (hits + 1) / (shuffles + 1). Then the segments are split again, until nothing is.

Choices made here, not in the paper:

- a minimum segment length (``min_size``, default 3) for X and Y, so one odd run cannot be a regime;
- the same history always gives the same verdict (a gate that flips on a rerun of the same data is worse than
  useless), and a history one night longer draws nearly the same shuffles: shuffle ``i`` orders a segment's
  runs by a hash of (the series' seed, ``i``, the run's position in the series), so appending a run inserts it
  into each shuffle and leaves the other runs' order alone. A borderline p then moves with the data, not with a
  reshuffle of the draws each night;
- shuffles are drawn in blocks until the verdict at ``pvalue`` is settled (``sequential.py``), up to
  ``permutations`` (default 9,999): a candidate far from the level stops after a block or two, a clear change
  after about 700 shuffles, and only one near the level draws them all. 199 fixed shuffles left p <= 0.01 to
  one hit more or less;
- memory stays bounded: Q for all (tau, kappa) comes from two-dimensional prefix sums of |z_i - z_j| (energy.py),
  an (n + 1, n + 1) grid per shuffle, in float32 with a bound on each top's error (a shuffle whose top is within its
  bound of the candidate's is computed again in float64), and a block holds as many shuffles as fit in
  ``BLOCK_BYTES``.

A series of more than ``EXACT_RUNS`` runs is tested the same way with one difference (``windows.py``): a split's X
and Y lie within one window of ``2 * HALF`` runs of a fixed grid, so each shuffle costs the windows' grids, not the
whole series' (at 1,000 runs a fifth as many cells), and its tests are curtailed (``sequential.py``). The best split
over all windows is the candidate and each shuffle's best over all windows is what it is compared with, so where the
candidate sits is chosen inside the permutation, as the whole-series test chooses it: on a series with no change,
the chance of a change point is the level. Apache Otava's search (``otava_search.py``, the extra ``changepoint``),
split and merge with no shuffles, says which long series are tested at all: one where it finds nothing is reported
without change. Without the extra, a long series is tested whole (minutes at 1,000 runs). Otava's own verdict, a
Student's t-test on the split it chose, is not used: on noise it finds change points far more often than its level,
and it misses a regression fixed a few runs later (docs/evidence/history.md has the side-by-side). MongoDB's
``signal-processing-algorithms`` (kappa fixed, no minimum segment, unseeded shuffles) requires numpy < 2,
setuptools < 71 and Python 3.11 exactly, and builds a C extension from its sdist: it does not install beside the
suite's stack.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from scalegate.history import energy, otava_search, sequential, windows

DEFAULT_PVALUE = 0.01
DEFAULT_PERMUTATIONS = 9999  # the cap: a sequential test (sequential.py) stops as soon as the verdict is settled
DEFAULT_MIN_SIZE = 3
BLOCK_BYTES = 8 * 2**20  # one (shuffles, n + 1, n + 1) float32 grid per block (energy.Rough); a few live at once
CELL = 4  # bytes of a grid's cell: float32
MAX_BLOCK = 100  # shuffles per block at most, so a hopeless candidate stops early at short series too
FIRST_BLOCK = 4  # a curtailed test's first block, doubling: it stops at its first hits, often among the first few
LATER_HITS = 2  # a long series' later change points: 299 shuffles at 0.01, up to 2 as extreme (windows.py)
EXACT_RUNS = 100  # a series up to this long is tested whole; a longer one within windows, where Otava finds a change
HALF = 50  # a long series' windows: 2 * HALF runs, one every HALF runs (windows.py)


@dataclass(frozen=True, kw_only=True)
class ChangePoint:
    index: int  # the first point of the new regime
    pvalue: float
    statistic: float
    permutations: int = 0  # shuffles its test drew before the verdict was settled


def _hits(z: np.ndarray, pieces: list[tuple[int, int]], min_size: int, q: float, kernels: energy.Kernels) -> int:
    """How many rows of ``z`` (shape (k, n)) have a split in any piece with Q >= ``q`` (> 0): what a shuffle is
    compared with. Pieces of one length go through ``energy.exceed`` as one block with the test's ``kernels``."""
    hit = np.zeros(len(z), dtype=bool)
    by_length: dict[int, list[int]] = {}
    for a, b in pieces:
        if b - a >= 2 * min_size:
            by_length.setdefault(b - a, []).append(a)
    for length, starts in by_length.items():
        rows = np.concatenate([z[:, a : a + length] for a in starts])
        hit |= energy.exceed(rows, min_size, q, kernels).reshape(len(starts), len(z)).any(0)
    return int(hit.sum())


def _best(z: np.ndarray, bounds: list[tuple[int, int]], min_size: int) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``z`` (shape (k, n)): the best split over all segments, and its Q."""
    best_index = np.full(len(z), -1)
    best_q = np.full(len(z), -np.inf)
    for a, b in bounds:
        q = energy.q_values(z[:, a:b], min_size)
        i = q.argmax(1)
        top = q[np.arange(len(z)), i]
        better = top > best_q
        best_index[better], best_q[better] = a + i[better], top[better]
    return best_index, best_q


def seed_for(name: str) -> int:
    """A stable seed per series (Python's hash() is salted per process)."""
    return zlib.crc32(name.encode())


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: uint64 in, well-spread uint64 out (arrays wrap on overflow, as wanted)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _keys(seed: int, rows: range, n: int) -> np.ndarray:
    """(len(rows), n) random keys: key [i, j] depends only on the seed, shuffle i and position j."""
    shuffle = _mix(np.uint64(seed) + np.arange(rows.start, rows.stop, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    position = _mix(np.arange(n, dtype=np.uint64) + np.uint64(0x632BE59BD9B4E019))
    return _mix(shuffle[:, None] ^ position[None, :])


def _shuffled(z: np.ndarray, bounds: list[tuple[int, int]], seed: int, rows: range) -> np.ndarray:
    """Shuffles ``rows`` of ``z``, each segment's points permuted among themselves (change points found stay)."""
    keys = _keys(seed, rows, len(z))
    out = np.empty((len(rows), len(z)))
    for a, b in bounds:
        out[:, a:b] = z[a + np.argsort(keys[:, a:b], axis=1, kind="stable")]
    return out


def block_size(n: int) -> int:
    """Shuffles per block: one (shuffles, n + 1, n + 1) grid within ``BLOCK_BYTES``, at least one."""
    return int(min(MAX_BLOCK, max(1, BLOCK_BYTES // (CELL * (n + 1) ** 2))))


def _local_block(pieces: list[tuple[int, int]]) -> int:
    """Shuffles per block of a local test: every piece's grid within ``BLOCK_BYTES``, at least one."""
    cells = sum((b - a + 1) ** 2 for a, b in pieces) or 1
    return int(min(MAX_BLOCK, max(1, BLOCK_BYTES // (CELL * cells))))


def permutation_test(
    z: np.ndarray,
    bounds: list[tuple[int, int]],
    q: float,
    *,
    pvalue: float,
    permutations: int,
    min_size: int,
    seed: int,
    risk: float = sequential.DEFAULT_RISK,
    pieces: list[tuple[int, int]] | None = None,
    curtailed: int | None = None,
) -> tuple[float, int]:
    """(p, shuffles drawn): how often shuffling within ``bounds`` gives a best Q >= ``q`` (best over ``pieces``,
    default the segments themselves), drawn block by block until ``sequential.settled`` says the verdict at
    ``pvalue`` is decided, or ``permutations`` are drawn. ``curtailed`` (a number of hits): ``sequential.fewest``
    shuffles for it, stopped at one hit more; (1.0, 0) where ``permutations`` is fewer, too few to show the level."""
    fixed = None if curtailed is None else sequential.fewest(pvalue, curtailed)
    if fixed is not None and permutations < fixed:
        return 1.0, 0
    cap = permutations if fixed is None else fixed
    hits = drawn = 0
    kernels = energy.Kernels()
    most = block_size(len(z)) if pieces is None else _local_block(pieces)
    step = min(FIRST_BLOCK, most) if pieces is not None else most
    while drawn < cap:
        rows = range(drawn, min(cap, drawn + step))
        hits += _hits(_shuffled(z, bounds, seed, rows), pieces or bounds, min_size, q, kernels)
        drawn = rows.stop
        if hits > curtailed if curtailed is not None else sequential.settled(hits, drawn, pvalue, risk):
            break
        step = min(2 * step, most)
    return (hits + 1) / (drawn + 1), drawn


def e_divisive(
    values,
    *,
    pvalue: float = DEFAULT_PVALUE,
    permutations: int = DEFAULT_PERMUTATIONS,
    min_size: int = DEFAULT_MIN_SIZE,
    seed: int = 0,
    risk: float = sequential.DEFAULT_RISK,
    half: int | None = None,
) -> list[ChangePoint]:
    """Significant change points of ``values``, sorted by index (each index starts a new regime). ``half``: splits
    seen only within the grid's windows of ``2 * half`` runs (windows.py), each test curtailed (``permutation_test``):
    the first at no hit, a later one at ``LATER_HITS``."""
    z = np.asarray(values, dtype=float)
    if z.ndim != 1 or not np.all(np.isfinite(z)):
        raise ValueError("e_divisive needs a one-dimensional series of finite numbers")
    found: list[ChangePoint] = []
    while True:
        edges = [0] + sorted(c.index for c in found) + [len(z)]
        bounds = list(zip(edges[:-1], edges[1:]))
        pieces = None if half is None else windows.pieces(len(z), half, bounds, min_size)
        top_index, top_q = _best(z[None], pieces or bounds, min_size)
        index, q = int(top_index[0]), float(top_q[0])
        if index < 0 or q <= 0:
            break
        p, drawn = permutation_test(
            z, bounds, q, pvalue=pvalue, permutations=permutations, min_size=min_size, seed=seed, risk=risk,
            pieces=pieces, curtailed=None if half is None else LATER_HITS if found else 0,
        )  # fmt: skip
        if not sequential.within(p, pvalue):
            break
        found.append(ChangePoint(index=index, pvalue=p, statistic=q, permutations=drawn))
    return sorted(found, key=lambda c: c.index)


def find(
    values,
    *,
    pvalue: float = DEFAULT_PVALUE,
    permutations: int = DEFAULT_PERMUTATIONS,
    min_size: int = DEFAULT_MIN_SIZE,
    seed: int = 0,
    risk: float = sequential.DEFAULT_RISK,
) -> list[ChangePoint]:
    """The change points the history reports, sorted by index: ``e_divisive`` over the whole series up to
    ``EXACT_RUNS`` runs (or without Otava); a longer one where Otava's search finds a candidate, ``e_divisive`` with
    its splits seen within windows of ``2 * HALF`` runs (windows.py), and none where Otava finds nothing."""
    z = np.asarray(values, dtype=float)
    kw = dict(pvalue=pvalue, permutations=permutations, min_size=min_size, seed=seed, risk=risk)
    if len(z) <= EXACT_RUNS or not otava_search.available():
        return e_divisive(z, **kw)
    if not np.all(np.isfinite(z)):
        raise ValueError("e_divisive needs a one-dimensional series of finite numbers")
    if not otava_search.candidates(z, min_size=min_size):
        return []
    return e_divisive(z, half=HALF, **kw)
