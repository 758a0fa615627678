"""Change-point detectors side by side on the same series: the suite's, Apache Otava's, MongoDB's.

    .venv/bin/python -m experiments.changepoint_compare --markdown /tmp/cp.md --json /tmp/cp.json
    .venv/bin/python -m experiments.changepoint_compare --sets planted,recorded --detectors otava,adopted
    .venv/bin/python -m experiments.changepoint_compare --mongodb-python /tmp/spa/bin/python ...

Detectors, each at its own defaults:

- ``whole``: the permutation-tested E-divisive over the whole series (``changepoint.e_divisive``: p <= 0.01, kappa
  free, at least 3 runs a side, up to 9,999 keyed shuffles, stopped when settled), the check as it was;
- ``otava``: ``otava.analysis.compute_change_points`` as Otava ships it (windows of 50 runs, Student's t-test,
  p <= 0.001, no minimum segment);
- ``adopted``: ``changepoint.find``, what ``history check`` runs: ``whole`` up to 100 runs; beyond that, where
  Otava's search (a minimum segment of 3 runs) finds a candidate, ``local``, and no change point where it finds none;
- ``local``: ``changepoint.e_divisive(..., half=50)`` on every series longer than 100 runs (``whole`` up to 100):
  ``whole`` with each split's X and Y within one window of 100 runs of a fixed grid, the best over all windows in
  each shuffle, the tests curtailed (windows.py); ``adopted`` without Otava's screen;
- ``mongodb``: ``signal_processing_algorithms.energy_statistics.e_divisive`` (p <= 0.05, 100 shuffles, numpy's
  global generator seeded per series), run by ``--mongodb-python``: an interpreter whose environment has it
  (it needs numpy < 2 and Python 3.11: ``python3.11 -m venv /tmp/spa && /tmp/spa/bin/pip install
  signal-processing-algorithms==2.1.6``); without one its rows say so.

Sets of series:

- ``planted``: the shapes of tests/test_history_changepoint.py (3% noise): a 10% step at run 12 of 20 (five seeds),
  a 20% regression over runs 8-13 fixed at 14 (three seeds), a slow drift 12% down over runs 15-24 of 40 (three
  seeds; found when a change point lies in 14-25), a single night at 50% (run 10 of 20, five seeds: any change point
  is false), noise only (100 series of 20 runs); then the same shapes at the end of 1,000 runs (two seeds each, 20
  series of noise);
- ``recorded``: the histories the repository's history tests record, added to a SQLite store and read back as
  ``history check`` reads them: tests/test_history.py's ``series_runs`` (20 nightlies, ddp 15% slower from 16,
  fsdp's memory 20% higher from 9) and tests/test_history_events.py's ``nightlies`` (64 nights, ddp 8% slower at
  60); the repository keeps no real run's series (docs/history.md prints only the verdicts of its real ones);
- ``nightly``: benchmarks/dashboard_scale.py's 1,000 runs x 300 series (12% slower from run 666 in efficiency,
  local efficiency and throughput of every 10th case, 15% more memory in the last 3 runs of every 7th).

Per set and detector: the planted changes found (a change point within one run of a step, or inside a drift), the
change points that are false (anywhere else), the noise-only series holding any, and the wall time of the set
(``--no-times`` writes "pending" instead: figures from a shared machine do not belong in the docs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from benchmarks.dashboard_scale import history as nightly_history
from scalegate.history import changepoint, check, store

DETECTORS = ("whole", "otava", "adopted", "local", "mongodb")
SETS = ("planted", "recorded", "nightly")


@dataclass(frozen=True)
class Series:
    name: str
    values: list[float]
    planted: tuple[tuple[int, int], ...]  # where a found change point counts: (first, last) runs, inclusive
    shape: str  # its row in the table


def noisy(n: int, seed: int) -> np.ndarray:
    return 1.0 + 0.03 * np.random.default_rng(seed).standard_normal(n)


def _shapes(n: int, seed: int) -> dict[str, tuple[np.ndarray, tuple[tuple[int, int], ...]]]:
    """Each planted shape in a series of ``n`` runs (20 or 40 as in the tests; at 1,000 the same tail)."""
    z, at = noisy(n, seed), n - 20  # the shapes of 20 runs sit in the last 20 of a long series
    step, fixed, spike = z.copy(), z.copy(), z.copy()
    step[at + 12 :] *= 0.9
    fixed[at + 8 : at + 14] *= 0.8
    spike[at + 10] *= 0.5
    drift = noisy(max(n, 40), 50 + seed)[-n:] if n >= 40 else noisy(40, 50 + seed)
    d0 = len(drift) - 25
    drift[d0 : d0 + 10] *= np.linspace(1, 0.88, 10)
    drift[d0 + 10 :] *= 0.88
    return {
        "a step": (step, ((at + 11, at + 13),)),
        "a regression later fixed": (fixed, ((at + 7, at + 9), (at + 13, at + 15))),
        "a slow drift": (drift, ((d0 - 1, d0 + 10),)),
        "a single spike": (spike, ()),
    }


def planted() -> list[Series]:
    out = []
    for n, seeds in ((20, range(5)), (1000, range(2))):
        for seed in seeds:
            for shape, (z, where) in _shapes(n, seed).items():
                if shape == "a regression later fixed" and n == 20 and seed > 2 or shape == "a slow drift" and seed > 2:
                    continue  # the tests' three seeds
                if shape == "a single spike" and n == 20:
                    z = noisy(20, 70 + seed)
                    z[10] *= 0.5
                out.append(Series(f"{shape}/{n}/{seed}", [float(v) for v in z], where, f"{shape}, {len(z)} runs"))
        for seed in range(100 if n == 20 else 20):
            out.append(Series(f"noise/{n}/{seed}", [float(v) for v in noisy(n, 20_000 + seed)], (), f"noise only, {n} runs"))  # fmt: skip
    return out


def recorded(work: Path) -> list[Series]:
    """The tests' histories through a real store, each series as ``history check`` reads it."""
    from tests.runs import add_all, nightlies, series_runs

    histories = {
        "series_runs": (series_runs(work / "a", 20, slow_from=16, grow_from=9), 16, 9),
        "nightlies": (nightlies(work / "b", upgrade_at=60, drop_at=60), 60, None),
    }
    out = []
    for label, (runs, slow, grow) in histories.items():
        db = work / f"{label}.sqlite"
        add_all(db, runs)
        with store.connect(db) as conn:
            series = store.all_series(conn, check.CHECKED)
        for key, points in series.items():
            slowed = key.case_id == "ddp-cnn-1x2" and key.metric in ("efficiency", "local_efficiency", "throughput")
            grown = grow is not None and key.case_id == "fsdp-cnn-1x2" and key.metric == "peak_memory_bytes"
            at = slow if slowed else grow if grown else None
            name = f"{key.machine}/{key.case_key}/{key.metric}"
            where = ((at - 1, at + 1),) if at is not None else ()
            out.append(Series(name, [p.value for p in points], where, f"{label}, {len(points)} runs"))
    return out


def nightly() -> list[Series]:
    runs, cases = nightly_history(1000, 50)
    out = []
    for key, values in cases.items():
        for metric, z in values.items():
            n = len(z)
            k = list(cases).index(key)
            at = 2 * n // 3 if k % 10 == 0 and metric in ("efficiency", "local_efficiency", "throughput") else None
            at = n - 3 if k % 7 == 0 and metric == "peak_memory_bytes" else at
            where = ((at - 1, at + 1),) if at is not None else ()
            out.append(Series(f"{runs[0].profile}/{key}/{metric}", [float(v) for v in z], where, "1,000 runs x 300"))
    return out


def _whole(s: Series) -> list[int]:
    return [c.index for c in changepoint.e_divisive(s.values, seed=changepoint.seed_for(s.name))]


def _adopted(s: Series) -> list[int]:
    return [c.index for c in changepoint.find(s.values, seed=changepoint.seed_for(s.name))]


def _local(s: Series) -> list[int]:
    seed, half = changepoint.seed_for(s.name), changepoint.HALF if len(s.values) > changepoint.EXACT_RUNS else None
    return [c.index for c in changepoint.e_divisive(s.values, seed=seed, half=half)]


def _otava(s: Series) -> list[int]:
    from otava.analysis import compute_change_points

    return [int(c.index) for c in compute_change_points(s.values)[0]]


MONGODB = """
import json, sys, numpy as np
from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive
for name, values, seed in json.load(sys.stdin):
    np.random.seed(seed)
    print(json.dumps(sorted(int(i) for i in e_divisive(values, pvalue=0.05, permutations=100))), flush=True)
"""


def run(detector: str, series: list[Series], mongodb_python: str) -> tuple[list[list[int]] | None, float, str]:
    """Each series' change points by ``detector``, the seconds taken, and why not where it could not run."""
    if detector == "mongodb":
        if not mongodb_python:
            return None, 0.0, "not run: it needs numpy < 2 and Python 3.11 (--mongodb-python)"
        feed = json.dumps([[s.name, s.values, changepoint.seed_for(s.name) % 2**32] for s in series])
        start = time.perf_counter()
        done = subprocess.run([mongodb_python, "-c", MONGODB], input=feed, capture_output=True, text=True, check=True)
        return [json.loads(line) for line in done.stdout.splitlines()], time.perf_counter() - start, ""
    fn: Callable[[Series], list[int]] = {"whole": _whole, "otava": _otava, "adopted": _adopted, "local": _local}[
        detector
    ]
    if detector == "otava":
        _otava(series[0])  # its import (scipy) outside the timing, as the others' numpy
    start = time.perf_counter()
    found = [fn(s) for s in series]
    return found, time.perf_counter() - start, ""


def score(series: list[Series], found: list[list[int]]) -> dict[str, dict[str, int]]:
    """Per shape: series, planted changes, those found within their window, false change points, noise-only
    series holding a false one."""
    rows: dict[str, dict[str, int]] = {}
    for s, points in zip(series, found):
        row = rows.setdefault(
            s.shape, {"series": 0, "planted": 0, "found": 0, "false": 0, "quiet": 0, "quiet_false": 0}
        )
        row["series"] += 1
        row["planted"] += len(s.planted)
        row["found"] += sum(any(lo <= i <= hi for i in points) for lo, hi in s.planted)
        false = [i for i in points if not any(lo <= i <= hi for lo, hi in s.planted)]
        row["false"] += len(false)
        row["quiet"] += not s.planted
        row["quiet_false"] += bool(false) and not s.planted
    return rows


def markdown(results: list[dict], times: bool) -> str:
    lines = [
        "| series | detector | planted changes found | false change points | noise-only series with one | wall time |",
        "|---|---|--:|--:|--:|--:|",
    ]
    for r in results:
        wall = f"{r['seconds']:.2f} s" if times else "pending"
        if r["why"]:
            lines.append(f"| {r['set']} | {r['detector']} | {r['why']} | | | |")
            continue
        for shape, row in r["rows"].items():
            planted = f"{row['found']} of {row['planted']}" if row["planted"] else "-"
            quiet = f"{row['quiet_false']} of {row['quiet']}" if row["quiet"] else "-"
            lines.append(f"| {shape} | {r['detector']} | {planted} | {row['false']} | {quiet} | {wall} |")
            wall = '"'  # the set's time, once
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--detectors", default=",".join(DETECTORS), help="default: %(default)s")
    p.add_argument("--sets", default=",".join(SETS), help="default: %(default)s")
    p.add_argument("--mongodb-python", default="", help="an interpreter with signal-processing-algorithms")
    p.add_argument("--markdown", type=Path, help="write the table here")
    p.add_argument("--json", type=Path, help="write every series' change points and the scores here")
    p.add_argument("--no-times", action="store_true", help='"pending" in the wall-time column')
    p.add_argument(
        "--longest", type=int, default=None, help="leave out series longer than this (the whole test takes minutes)"
    )
    args = p.parse_args()
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores")
    results = []
    with tempfile.TemporaryDirectory(prefix="changepoint-compare-") as work:
        makers = {"planted": planted, "recorded": lambda: recorded(Path(work)), "nightly": nightly}
        for name in args.sets.split(","):
            series = [s for s in makers[name]() if args.longest is None or len(s.values) <= args.longest]
            for detector in args.detectors.split(","):
                found, seconds, why = run(detector, series, args.mongodb_python)
                rows = score(series, found) if found is not None else {}
                results.append({"set": name, "detector": detector, "seconds": seconds, "why": why, "rows": rows,
                                "found": {s.name: f for s, f in zip(series, found or [])}})  # fmt: skip
                print(f"{name} {detector}: {seconds:.2f} s {why}", flush=True)
    table = markdown(results, not args.no_times)
    print(table + f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.markdown:
        args.markdown.write_text(table)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
