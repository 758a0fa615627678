"""What one series' change-point check costs at 30, 100 and 365 runs: wall time and peak memory, per shape.

    .venv/bin/python -m benchmarks.history_scale [--sizes 30,100,365] [--repeat 3]

Shapes, 3% Gaussian noise: ``flat`` (no change: one candidate, stopped after a block or two), ``step`` (10% lower
from two thirds in: one change point, ~700 shuffles, then a stopped candidate), ``dip`` (20% lower over the
middle sixth, then restored: two change points) and ``cap`` (one permutation test forced to draw all
``--permutations`` shuffles, as a candidate whose p sits at the level does). Time is the median of ``--repeat``
calls of the shipped ``scalegate.history.changepoint`` without tracing; peak memory is tracemalloc's peak over
one more call (numpy's arrays included). The load average is printed with the numbers: the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import tracemalloc

import numpy as np

from scalegate.history import changepoint as cp


def shape(name: str, n: int) -> np.ndarray:
    z = 1.0 + 0.03 * np.random.default_rng(n).standard_normal(n)
    if name == "step":
        z[2 * n // 3 :] *= 0.9
    if name == "dip":
        z[n // 2 - n // 12 : n // 2 + n // 12] *= 0.8
    return z


def call(name: str, z: np.ndarray, permutations: int) -> str:
    if name != "cap":
        found = cp.e_divisive(z, seed=1, permutations=permutations)
        return ", ".join(f"{c.index} (p={c.pvalue:.4f}, {c.permutations} shuffles)" for c in found) or "none"
    bounds = [(0, len(z))]
    q = float(cp._best(z[None], bounds, cp.DEFAULT_MIN_SIZE)[1][0])
    p, drawn = cp.permutation_test(
        z, bounds, q, pvalue=0.01, permutations=permutations, min_size=cp.DEFAULT_MIN_SIZE, seed=1, risk=0
    )
    return f"p={p:.4f}, {drawn} shuffles"


def measure(name: str, n: int, repeat: int, permutations: int) -> dict:
    z = shape(name, n)
    times = []
    for _ in range(repeat if name != "cap" else 1):
        start = time.perf_counter()
        found = call(name, z, permutations)
        times.append(time.perf_counter() - start)
    tracemalloc.start()
    try:
        call(name, z, permutations)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return {"shape": name, "n": n, "s": statistics.median(times), "peak_mib": peak / 2**20, "found": found}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="30,100,365")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--permutations", type=int, default=cp.DEFAULT_PERMUTATIONS)
    p.add_argument("--shapes", default="flat,step,dip,cap")
    args = p.parse_args()
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores")
    print(f"{'shape':6} {'n':>4} {'time':>9} {'peak MiB':>9}  change points (shuffles drawn)")
    for n in (int(x) for x in args.sizes.split(",")):
        for name in args.shapes.split(","):
            r = measure(name, n, args.repeat, args.permutations)
            print(f"{r['shape']:6} {r['n']:4} {r['s']:8.3f}s {r['peak_mib']:9.1f}  {r['found']}", flush=True)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
