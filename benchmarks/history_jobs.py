"""``history report`` with its series checked one at a time and ``--jobs`` at a time: what the processes buy.

    .venv/bin/python -m benchmarks.history_jobs [--runs 1000] [--cases 50] [--jobs 2] [--repeat 2] [--permutations 9999]

The history is benchmarks/dashboard_scale.py's (``--runs`` nightlies of ``--cases`` cases x 6 metrics, 300 series by
default), added to one SQLite file. ``python -m scalegate history report`` then runs over it with ``--jobs 1`` and
with ``--jobs N``, taking turns ``--repeat`` times so both see the same moments of the machine; printed: each one's
median and range, and their ratio (that the verdicts are the same at any ``--jobs`` is tests/test_history.py's).
The permutation test's cap is the shipped one unless ``--permutations`` says otherwise. The load average is printed
with the numbers: the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from benchmarks.history_stores import fill, history, report, spread
from scalegate.contract import affinity
from scalegate.history import changepoint


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--cases", type=int, default=50, help="series = cases x 6 metrics (default: 50, so 300)")
    p.add_argument("--jobs", type=int, default=len(affinity.node_cpus()))
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--permutations", type=int, default=changepoint.DEFAULT_PERMUTATIONS)
    p.add_argument(
        "--work", type=Path, default=None, help="the SQLite file and the pages here (default: a new temp dir)"
    )
    args = p.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="history-jobs-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores")
    runs, cases = history(args.runs, args.cases)
    where = str(work / "history.sqlite")
    print(f"{args.runs} runs x {len(cases) * 6} series added in {fill(where, runs, cases):.1f} s")
    took: dict[int, list[float]] = {1: [], args.jobs: []}
    for _ in range(args.repeat):
        for jobs in took:
            took[jobs].append(report(where, work / f"page-{jobs}", args.permutations, ["--jobs", str(jobs)]))
    for jobs, values in took.items():
        print(f"--jobs {jobs}: report {spread(values)}")
    ratio = statistics.median(took[1]) / statistics.median(took[args.jobs])
    print(f"--jobs 1 / --jobs {args.jobs}, medians: x{ratio:.2f}")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; pages in {work}")


if __name__ == "__main__":
    main()
