"""Where a long series' splits are seen: a fixed grid of windows, and why its tests are curtailed.

A series of more than ``changepoint.EXACT_RUNS`` runs is tested as the whole-series test tests a short one, except
that X and Y of a split lie within one window of ``2 * half`` runs: one window starts every ``half`` runs from the
first run and the last runs on to the series' end (``2 * half`` to ``3 * half - 1`` runs), cut where change points
were already found (``pieces``). A shuffle's statistic is its best Q over every window, as the whole test's is over
every split, so the place a change point is looked for is chosen inside the permutation: on noise a long series
holds a change point at the level, not more. (Testing only the windows around the candidates of a search, each by
shuffling its own runs, found change points in 11 of 277 noise series of 1,000 runs at p <= 0.01: the windows were
those where the series looked most like a change, and their tests did not know it.) Shuffling the whole series, not
a window's runs, also keeps a short change at the end visible: three high runs of 100 land side by side in a
shuffle of 100 runs about once in 7,000 (p ~ 1.5e-4), in a shuffle of 1,000 almost never.

At 1,000 runs a shuffle costs 19 windows of 100 runs, about a fifth of the whole series' grid, so each test is
curtailed (``sequential.fewest``): the first change point with the fewest shuffles that can show the level (99 at
0.01), stopped at the first shuffle as extreme; each later one with 299, stopped at the third. A later split sits in
a segment of a few runs beside one already found, where even a real change reaches p ~ 0.003 at best (a regression
fixed six runs later, from the six runs after it), which 99 shuffles would miss about one time in four. A p is exact
for its number of shuffles, so either test keeps its level.

A grid anchored at the first run keeps every window but the last as it is when runs are appended.
"""

from __future__ import annotations


def grid(n: int, half: int) -> list[tuple[int, int]]:
    """The windows [start, end) of a series of ``n`` runs: ``2 * half`` runs every ``half`` runs, the last to the end;
    one window, the whole series, below ``3 * half`` runs."""
    if half < 1 or n < 1:
        raise ValueError(f"a grid needs half >= 1 and n >= 1, got half {half}, n {n}")
    count = max(1, n // half - 1)
    return [(j * half, (j + 2) * half if j < count - 1 else n) for j in range(count)]


def pieces(n: int, half: int, bounds: list[tuple[int, int]], min_size: int) -> list[tuple[int, int]]:
    """Each window of the grid cut at the segments' edges (``bounds``): the stretches [start, end) a split may use
    (X from the stretch's start), each long enough for two sides of ``min_size`` runs, each once."""
    found = {
        (max(a, s), min(b, e)) for a, b in grid(n, half) for s, e in bounds if min(b, e) - max(a, s) >= 2 * min_size
    }
    return sorted(found)
