"""``history report`` and ``history check`` over SQLite and over PostgreSQL on the same generated history, timed.

    export SCALEGATE_TEST_POSTGRES_URL=$(db/local-postgres.sh start)
    .venv/bin/python -m benchmarks.history_stores [--runs 1000] [--cases 50] [--repeat 3] [--permutations 9999]
    db/local-postgres.sh stop

The history is benchmarks/dashboard_scale.py's: ``--runs`` nightlies of ``--cases`` cases x 6 metrics (300 series by
default), 3% noise, every 10th case 12% slower from two thirds in, every 7th 15% heavier in the last 3 nights. It
is added to a SQLite file and to a fresh database on the server at ``--postgres-url`` (default
``$SCALEGATE_TEST_POSTGRES_URL``; dropped afterwards), then ``python -m scalegate history report`` and ``history
check`` run over each, ``--repeat`` times, the stores taking turns so both see the same moments of the machine, each
with its shipped defaults (``--jobs``: the cores this process may run on; ``--permutations``: the shipped cap).
Printed: the time to add the runs; per store the median and range of the whole report command and of the check
(in this process: the interpreter's start is left out, the same for both), of the check as a nightly runs it, a
``python -m scalegate history check`` process of its own (its interpreter's start and imports included; not held to
the budget), and of the report's read of the store alone; the page's size; each figure against its budget (docs/history.md): a report within 15 s and within 2 s of
SQLite's over PostgreSQL, a check within 5 s, a page under 15 MB; and the CPU each command used (user and system,
with its ``--jobs`` workers; not the PostgreSQL server's own), which a shared machine inflates far less than the
wall time. The load average is
printed with the numbers: the machine may be shared.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Iterator

from benchmarks.dashboard_scale import history
from scalegate.cli import main as scalegate_main
from scalegate.history import changepoint, check, store

BUDGET_S, PAGE_BUDGET_MB = 2.0, 15.0  # PostgreSQL's report over SQLite's; the page
REPORT_BUDGET_S, CHECK_BUDGET_S = 15.0, 5.0  # at 1,000 runs x 300 series


@contextlib.contextmanager
def fresh_database(url: str) -> Iterator[str]:
    """A new, empty database on the server at ``url``; its URL. Dropped afterwards, its connections with it."""
    import psycopg

    name = f"sg_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    parts = urllib.parse.urlsplit(url)
    try:
        yield urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def fill(where: str, runs, cases) -> float:
    """Every generated run added to the store at ``where``, as ``history add`` adds one; seconds taken."""
    start = time.perf_counter()
    with store.connect(where, create=True) as db:
        for i, run in enumerate(runs):
            rows = [
                store.CaseRow(case_key=k, case_id=k.rpartition(":")[0], status="ok", metrics={m: float(z[i]) for m, z in v.items()})
                for k, v in cases.items()
            ]  # fmt: skip
            store.add(db, run, rows)
    return time.perf_counter() - start


def read(where: str) -> float:
    """The report's read of the store alone: its runs and every checked series."""
    start = time.perf_counter()
    with store.connect(where) as db:
        runs = [r for r, _ in store.runs(db)]
        store.all_series(db, check.CHECKED, read=runs)
    return time.perf_counter() - start


def cpu_seconds() -> float:
    """User and system CPU of this process and its finished children (``--jobs``' workers, once joined)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def arguments(command: str, where: str, out: Path, permutations: int) -> list[str]:
    """``history report`` or ``check``'s arguments over ``where``: no baselines, the page (a report's) under ``out``."""
    argv = ["history", command, "--db", where, "--baseline-dir", str(out / "no-baselines")]
    argv += ["--out", str(out)] if command == "report" else []
    return argv + ["--permutations", str(permutations)]


def report(
    where: str,
    out: Path,
    permutations: int,
    more: list[str] | None = None,
    command: str = "report",
    cpu: list[float] | None = None,
) -> float:
    """``history report`` (or ``check``) over ``where``, in this process (``more``: its further arguments); seconds
    taken, and the CPU seconds it used appended to ``cpu``. A check's exit 1 (a new regression: the generated history
    holds some) is its answer, not a failure."""
    argv = arguments(command, where, out, permutations) + (more or [])
    start, used = time.perf_counter(), cpu_seconds()
    with contextlib.redirect_stdout(io.StringIO()):
        code = scalegate_main.main(argv)
    took = time.perf_counter() - start
    if cpu is not None:
        cpu.append(cpu_seconds() - used)
    if code not in ((0, 1) if command == "check" else (0,)):
        sys.exit(f"history {command} over {where} exited {code}")
    return took


def fresh_check(where: str, out: Path, permutations: int) -> float:
    """``python -m scalegate history check`` over ``where`` as a nightly runs it, a process of its own; seconds taken,
    its interpreter's start and imports included. Exit 1 (a new regression) is its answer."""
    argv = [sys.executable, "-m", "scalegate", *arguments("check", where, out, permutations)]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.exit(f"history check over {where} exited {done.returncode}: {done.stderr[-2000:]}")
    return took


def within(name: str, value: float, budget: float, unit: str) -> str:
    return f"{name} {value:.2f} {unit} {'within' if value <= budget else 'OVER'} its budget of {budget:g} {unit}"


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):6.2f} s (range {min(values):.2f}-{max(values):.2f}, n={len(values)})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--cases", type=int, default=50, help="series = cases x 6 metrics (default: 50, so 300)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument(
        "--permutations",
        type=int,
        default=changepoint.DEFAULT_PERMUTATIONS,
        help="the check's cap of shuffles, the same over both stores (default: the shipped %(default)s)",
    )
    p.add_argument("--work", type=Path, default=None, help="keep the SQLite file and the pages here")
    p.add_argument("--postgres-url", default=os.environ.get("SCALEGATE_TEST_POSTGRES_URL", ""))
    args = p.parse_args()
    if not args.postgres_url:
        sys.exit("no PostgreSQL server: export SCALEGATE_TEST_POSTGRES_URL=$(db/local-postgres.sh start)")
    work = args.work or Path(tempfile.mkdtemp(prefix="history-stores-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores")
    runs, cases = history(args.runs, args.cases)
    sqlite = str(work / "history.sqlite")
    Path(sqlite).unlink(missing_ok=True)
    with fresh_database(args.postgres_url) as postgres:
        stores = {"sqlite": sqlite, "postgresql": postgres}
        for name, where in stores.items():
            print(f"{name}: {args.runs} runs x {len(cases) * 6} series added in {fill(where, runs, cases):.1f} s")
        kinds = ("report", "check", "read", "report cpu", "check cpu", "fresh check")
        took: dict[str, dict[str, list[float]]] = {n: {k: [] for k in kinds} for n in stores}
        for _ in range(args.repeat):
            for name, where in stores.items():  # taking turns: both stores see the same moments of the machine
                mine, page = took[name], work / f"page-{name}"
                mine["read"].append(read(where))
                mine["report"].append(report(where, page, args.permutations, cpu=mine["report cpu"]))
                mine["check"].append(report(where, page, args.permutations, command="check", cpu=mine["check cpu"]))
                mine["fresh check"].append(fresh_check(where, page, args.permutations))
    budgets = []
    for name in stores:
        size = (work / f"page-{name}" / "index.html").stat().st_size / 1e6
        print(f"{name:10} report {spread(took[name]['report'])}; its read of the store {spread(took[name]['read'])}")
        print(f"{name:10} check {spread(took[name]['check'])}")
        print(
            f"{name:10} check as a fresh process (its interpreter's start and imports too) {spread(took[name]['fresh check'])}"
        )
        print(f"{name:10} CPU (user + system, this process and its workers): report {spread(took[name]['report cpu'])}")
        print(f"{name:10} CPU: check {spread(took[name]['check cpu'])}")
        print(f"{name:10} page {size:.2f} MB (budget {PAGE_BUDGET_MB:.0f} MB)")
        budgets += [
            within(f"{name} report", statistics.median(took[name]["report"]), REPORT_BUDGET_S, "s"),
            within(f"{name} check", statistics.median(took[name]["check"]), CHECK_BUDGET_S, "s"),
            within(f"{name} page", size, PAGE_BUDGET_MB, "MB"),
        ]
    extra = statistics.median(took["postgresql"]["report"]) - statistics.median(took["sqlite"]["report"])
    print(f"postgresql - sqlite, medians of the report: {extra:+.2f} s (budget +{BUDGET_S:.0f} s)")
    print("budgets (medians, at the size above):\n  " + "\n  ".join(budgets))
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; pages in {work}")


if __name__ == "__main__":
    main()
