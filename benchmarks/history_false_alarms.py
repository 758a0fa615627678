"""How often would the nightly ``history check`` cry wolf, and how soon does it see a real step? Synthetic series.

    .venv/bin/python -m benchmarks.history_false_alarms [--series 200] [--noise 0.03] [--min-effect 0.05]

False alarms: ``--series`` steady histories of 30 runs with Gaussian noise ``--noise`` (relative), each checked
as a nightly would, after run 10, 12, ..., 30; a check that reports a *new* regression is a false alarm.
Detection: 30 histories with a 10% drop at run 20, checked after every run from 21 on; the number of nights
until the check reports a new regression at run 20 (+-1). Uses the shipped ``scalegate.history.check`` verbatim.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from scalegate.history import check as C
from scalegate.history.store import Point


def series(n: int, seed: int, noise: float, step_at: int | None = None, step: float = 0.0) -> np.ndarray:
    z = 1.0 + noise * np.random.default_rng(seed).standard_normal(n)
    if step_at is not None:
        z[step_at:] *= 1 + step
    return z


def alarms(values, nights, settings: C.Settings, min_effect: float, name: str) -> list[C.Change]:
    pts = [Point(run_id=f"r{i}", commit=f"c{i}", date=f"{i:04d}", value=float(v)) for i, v in enumerate(values)]
    out = []
    for n in nights:
        changes, _ = C.judge_series(pts[:n], "efficiency", min_effect=min_effect, settings=settings, name=name)
        out.append([c for c in changes if c.new and c.kind == C.REGRESSION])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--series", type=int, default=200)
    p.add_argument("--noise", type=float, default=0.03)
    p.add_argument("--min-effect", type=float, default=0.05)
    args = p.parse_args()
    settings = C.Settings()
    checks = false = 0
    for s in range(args.series):
        found = alarms(series(30, 900 + s, args.noise), range(10, 31, 2), settings, args.min_effect, f"flat{s}")
        checks += len(found)
        false += sum(bool(f) for f in found)
    nights = []
    for s in range(30):
        found = alarms(series(30, 300 + s, args.noise, 20, -0.10), range(21, 31), settings, args.min_effect, f"s{s}")
        nights.append(next((i + 1 for i, f in enumerate(found) if any(abs(c.index - 20) <= 1 for c in f)), None))
    seen = [n for n in nights if n is not None]
    print(
        f"noise {args.noise:.0%}, min effect {args.min_effect:.0%}, p <= {settings.pvalue}: false new regressions "
        f"in {false} of {checks} nightly checks of steady series ({false / checks:.2%}); a 10% drop found in "
        f"{len(seen)} of 30 histories, after a median of {statistics.median(seen) if seen else '-'} nights"
    )


if __name__ == "__main__":
    main()
