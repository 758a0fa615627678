"""``python -m scalegate history ...``: the results history and its change-point verdicts (docs/history.md).

    python -m scalegate history add results/nightly-123 [RUN ...] [--db FILE]   # idempotent per run id
    python -m scalegate history list [--db FILE]
    python -m scalegate history show ddp-cnn-1x2 [--db FILE]
    python -m scalegate history check [--db FILE] [--case CASE ...] [--recent 5] [--min-effect 0.05]
    python -m scalegate history report --out DIR [--db FILE] [--static]         # DIR/index.html

--db defaults to $SCALEGATE_HISTORY_DB, else results/history.sqlite: a SQLite file's path, or a PostgreSQL server's
URL (postgresql://USER@HOST:PORT/DATABASE, a team's clusters sharing one history). check exits 0 without a new
regression, 1 with one (a change point whose first bad run is among the last --recent runs, case not quarantined),
2 on bad input (a missing, corrupt or unreachable store, a URL of another kind, an unknown case).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from scalegate.contract import affinity, atomic
from scalegate.contract.errors import ScalegateError
from scalegate.history import changepoint, check, ingest, otava_search, store, summary
from scalegate.history.db import locate
from scalegate.plan import hostinfo
from scalegate.plan.option_types import output_dir, output_file

EXIT_OK, EXIT_REGRESSION = 0, 1


def db_path(args: argparse.Namespace) -> str:
    """The store ``--db`` or ``SCALEGATE_HISTORY_DB`` names: a file's path or a server's URL (history/db.py)."""
    return str(args.db or os.environ.get("SCALEGATE_HISTORY_DB") or store.DEFAULT_PATH)


def db_name(args: argparse.Namespace) -> str:
    """The store as messages name it: a URL without its password."""
    return locate(db_path(args)).name


def cmd_add(args: argparse.Namespace) -> int:
    if (args.commit or args.date) and len(args.run) > 1:
        raise ScalegateError(
            "--commit/--date name one run's commit and date, but several runs were given", "add such runs one at a time"
        )
    loaded = [
        ingest.from_directory(Path(r), commit=args.commit, date=args.date, note=args.note, partial=args.partial)
        for r in args.run
    ]
    with store.connect(db_path(args), create=True) as db:
        for run, cases in loaded:
            added = store.add(db, run, cases)
            print(
                f"history: {'added' if added else 'already there, unchanged:'} {run.run_id} (commit {run.commit}, "
                f"{run.date}, {run.profile}, {hostinfo.cluster_note(run.cluster)}, {len(cases)} cases) to {db.name}"
            )
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    with store.connect(db_path(args)) as db:
        rows = store.runs(db)
    print(f"{'run':32} {'commit':20} {'date':25} {'cases':>5}  {'cluster':12} profile")
    for run, n in rows:
        print(
            f"{run.run_id:32} {run.commit:20} {run.date:25} {n:5}  {run.cluster or '(none)':12} {run.profile}"
            + (f"  ({run.note})" if run.note else "")
        )
    print(f"{len(rows)} runs in {db_name(args)}")
    return EXIT_OK


def _unknown(db, names: list[str]) -> None:
    known = store.known_cases(db)
    ids = {k.split(":")[0] for k in known}
    missing = [n for n in names if n not in known and n not in ids]
    if missing:
        raise ScalegateError(
            f"case {', '.join(missing)} is not in the history",
            f"known cases: {', '.join(known) or 'none (add a run first)'}",
        )


def cmd_show(args: argparse.Namespace) -> int:
    with store.connect(db_path(args)) as db:
        _unknown(db, [args.case])
        rows = store.case_runs(db, args.case)
    metrics = sorted({m for _, c in rows for m in c.metrics})
    head = f"{'run':28} {'commit':20} {'date':25} {'machine':28} {'case':24} {'status':10} "
    print(head + " ".join(f"{m:>17}" for m in metrics))
    for run, case in rows:
        values = " ".join(f"{check.fmt(m, case.metrics[m]) if m in case.metrics else '-':>17}" for m in metrics)
        print(
            f"{run.run_id:28} {run.commit:20} {run.date:25} {run.machine:28} {case.case_key:24} {case.status:10} "
            f"{values}"
        )
    return EXIT_OK


def _settings(args: argparse.Namespace) -> check.Settings:
    for name, low, high in (("pvalue", 0, 1), ("min_effect", 0, 10)):
        value = getattr(args, name)
        if value is not None and not low < value < high:
            raise ScalegateError(
                f"--{name.replace('_', '-')} {value} is not in ({low}, {high})", "e.g. --pvalue 0.01 --min-effect 0.05"
            )
    if args.jobs is not None and args.jobs < 1:
        raise ScalegateError(
            f"--jobs {args.jobs}: need at least 1",
            "leave it out to check as many series at once as this process may use cores",
        )
    if args.recent < 1 or args.min_size < 2 or args.permutations < 19:
        raise ScalegateError(
            f"--recent {args.recent}, --min-size {args.min_size}, --permutations {args.permutations}: "
            "need --recent >= 1, --min-size >= 2, --permutations >= 19",
            f"the defaults are --recent {check.DEFAULT_RECENT} --min-size {changepoint.DEFAULT_MIN_SIZE} "
            f"--permutations {changepoint.DEFAULT_PERMUTATIONS}",
        )
    return check.Settings(
        pvalue=args.pvalue,
        permutations=args.permutations,
        min_size=args.min_size,
        recent=args.recent,
        min_effect=args.min_effect,
    )


def _verdicts(args: argparse.Namespace) -> tuple[list[check.SeriesVerdict], check.Settings, list[store.Run]]:
    settings = _settings(args)
    with store.connect(db_path(args)) as db:
        if args.case:
            _unknown(db, args.case)
        runs = [run for run, _ in store.runs(db)]
        jobs = args.jobs or len(affinity.node_cpus())  # under srun or sbatch: the allocation's cores
        found = check.check(
            db, baseline_dir=Path(args.baseline_dir), settings=settings, cases=args.case, runs=runs, jobs=jobs
        )
    long = sum(len(v.points) > changepoint.EXACT_RUNS for v in found)
    if long and not otava_search.available():
        print(
            f"history: {long} series longer than {changepoint.EXACT_RUNS} runs tested whole, without Apache Otava's "
            f"search (minutes at 1,000 runs); HINT: pip install 'scalegate[{otava_search.EXTRA}]'",
            file=sys.stderr,
        )
    return found, settings, runs


def cmd_check(args: argparse.Namespace) -> int:
    verdicts, settings, runs = _verdicts(args)
    print(summary.text(verdicts, settings, runs), end="")
    if args.json:
        atomic.write_text(Path(args.json), json.dumps(summary.to_json(verdicts, settings, runs), indent=2) + "\n")
    return EXIT_REGRESSION if any(v.failed for v in verdicts) else EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    verdicts, settings, runs = _verdicts(args)
    if not runs:  # a page of nothing would read as "no regression"
        raise ScalegateError(
            f"history database {db_name(args)} holds no runs: there is nothing to draw",
            "add runs first: python -m scalegate history add results/<run> [--db FILE]",
        )
    if args.static:  # matplotlib, imported only here: the interactive page does not need it
        from scalegate.history import static_page

        index = static_page.write(verdicts, Path(args.out), db_name(args), settings)
        print(f"history report: {index} ({len(verdicts)} plots, static)")
        return EXIT_OK
    from scalegate.history import dashboard

    index = dashboard.write(verdicts, Path(args.out), db_name(args), settings, runs)
    print(f"history report: {index} ({len(verdicts)} series, {index.stat().st_size / 1e6:.1f} MB, interactive)")
    return EXIT_OK


def _judging(p: argparse.ArgumentParser, baseline_dir: str) -> None:
    p.add_argument("--case", action="append", help="only this case (id or id:preset); repeat for more")
    p.add_argument(
        "--baseline-dir",
        default=baseline_dir,
        help="baselines lend each case's tolerance (the minimum effect) and quarantine (default: %(default)s)",
    )
    p.add_argument(
        "--recent",
        type=int,
        default=check.DEFAULT_RECENT,
        help="a change point is new when its first bad run is among the last N runs (default: %(default)s)",
    )
    p.add_argument(
        "--min-effect",
        type=float,
        default=None,
        help=f"smallest relative change that counts, for every case (default: the baseline's tolerance, "
        f"else {check.DEFAULT_MIN_EFFECT})",
    )
    p.add_argument(
        "--pvalue", type=float, default=changepoint.DEFAULT_PVALUE, help="permutation test level (default: %(default)s)"
    )
    p.add_argument(
        "--permutations",
        type=int,
        default=changepoint.DEFAULT_PERMUTATIONS,
        help="most shuffles in the permutation test; it stops as soon as the verdict at --pvalue is settled. A series "
        "longer than 100 runs draws the fewest that can show --pvalue (99 at 0.01, 299 for a later change point): "
        "with fewer allowed it holds no change point (default: %(default)s)",
    )
    p.add_argument(
        "--min-size",
        type=int,
        default=changepoint.DEFAULT_MIN_SIZE,
        help="fewest runs on each side of a change point (default: %(default)s)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="series checked at once, a process each; the verdicts are the same at any N (default: the cores this "
        "process may run on)",
    )


def add_parser(sub, baseline_dir: str) -> None:
    h = sub.add_parser(
        "history",
        help="results history: add runs, list, show, change-point check, HTML report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    hs = h.add_subparsers(dest="history_command", required=True)
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument(
        "--db",
        help="history database: a SQLite file or a postgresql:// URL "
        "(default: $SCALEGATE_HISTORY_DB, else results/history.sqlite)",
    )
    a = hs.add_parser("add", parents=[db], help="append finished runs (adding a run twice changes nothing)")
    a.add_argument("run", nargs="+")
    a.add_argument("--commit", help="record this commit instead of the run's own (one run)")
    a.add_argument("--date", help="record this ISO date instead of the run's own (one run)")
    a.add_argument("--note", default="", help="a note kept with the run, e.g. why its commit or date was set")
    a.add_argument("--partial", action="store_true", help="also take an interrupted run's finished cases")
    a.set_defaults(handler=lambda args, extra: cmd_add(args))
    hs.add_parser("list", parents=[db], help="the runs in the history").set_defaults(
        handler=lambda args, extra: cmd_list(args)
    )
    s = hs.add_parser("show", parents=[db], help="one case's metrics over the runs")
    s.add_argument("case")
    s.set_defaults(handler=lambda args, extra: cmd_show(args))
    c = hs.add_parser("check", parents=[db], help="change points per case and metric; exit 1 on a new regression")
    _judging(c, baseline_dir)
    c.add_argument(
        "--json",
        type=output_file("--json"),
        help="also write every series' verdict and change points as JSON to this file",
    )
    c.set_defaults(handler=lambda args, extra: cmd_check(args))
    r = hs.add_parser("report", parents=[db], help="DIR/index.html: every series' verdict and figure, filterable")
    r.add_argument("--out", required=True, type=output_dir("--out"), help="the page's directory (made if missing)")
    r.add_argument(
        "--static",
        action="store_true",
        help="the matplotlib page instead: one PNG per case and metric, no JavaScript (DIR/*.png, DIR/index.html)",
    )
    _judging(r, baseline_dir)
    r.set_defaults(handler=lambda args, extra: cmd_report(args))
