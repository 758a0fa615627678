"""Does a change point come and go from night to night? Synthetic borderline histories, checked ten nights running.

    .venv/bin/python -m benchmarks.history_nights [--series 120] [--nights 10]

Each history: 3% Gaussian noise and a step of 3-7% (uniform) at run 12, checked as a nightly would after run
20, 21, ... (one run more each night). Counted per way of drawing the shuffles: how often the reported change
points change from one night to the next, and how often a change point reported one night is gone the next
(it vanished, or moved). Ways: ``shipped`` (shuffles keyed by run position, sequential up to 9,999),
``cap 19999`` (the same, capped at 19,999: close to the exact p), ``keyed 199`` (keyed shuffles, a fixed 199)
and ``fresh 199`` (a fixed 199 drawn afresh each night, as the check did before: the seed changes with the
night). What ``cap 19999`` still counts is the data's own doing: a true p that crosses the level as runs
arrive, or a best split that moves by a run.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from scalegate.history import changepoint as cp

WAYS = {
    "shipped": lambda name, night: {"seed": cp.seed_for(name)},
    "cap 19999": lambda name, night: {"seed": cp.seed_for(name), "permutations": 19999},
    "keyed 199": lambda name, night: {"seed": cp.seed_for(name), "permutations": 199, "risk": 0},
    "fresh 199": lambda name, night: {"seed": cp.seed_for(f"{name}/{night}"), "permutations": 199, "risk": 0},
}


def history(s: int, runs: int) -> np.ndarray:
    rng = np.random.default_rng(5000 + s)
    step = rng.uniform(-0.07, -0.03)
    z = 1 + 0.03 * rng.standard_normal(runs)
    z[12:] *= 1 + step
    return z


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--series", type=int, default=120)
    p.add_argument("--nights", type=int, default=10)
    args = p.parse_args()
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    changed = dict.fromkeys(WAYS, 0)
    vanished = dict.fromkeys(WAYS, 0)
    start = time.monotonic()
    for s in range(args.series):
        z = history(s, 20 + args.nights)
        for way, kw in WAYS.items():
            v = [{c.index for c in cp.e_divisive(z[:n], **kw(f"border{s}", n))} for n in range(20, 20 + args.nights)]
            changed[way] += sum(a != b for a, b in zip(v, v[1:]))
            vanished[way] += sum(bool(a - b) for a, b in zip(v, v[1:]))
    print(f"{args.series} histories x {args.nights} nights in {time.monotonic() - start:.0f} s")
    print(f"{'way':10} {'changed':>8} {'vanished':>9}")
    for way in WAYS:
        print(f"{way:10} {changed[way]:8} {vanished[way]:9}")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
