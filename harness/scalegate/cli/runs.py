"""The commands on a finished run (a directory under results/, e.g. results/latest): compare, report, update-baselines.

    python -m scalegate compare results/latest [--baseline baselines/<profile>.json] [--json out.json]
    python -m scalegate compare results/gate/latest --base-run results/gate/latest/base   # an A/B gate run
    python -m scalegate report results/latest [--out results/latest/report]   # PNGs, report.md, index.html
    python -m scalegate update-baselines RUN [RUN ...] [--baseline-dir baselines] [--tolerance 0.1] [--ledger-only]

compare exits 0 when every case is ok, 1 on a regression or failed case (or a noisy one with --strict), 2 on bad
input (missing run, malformed file, unusable baseline) with a one-line error.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from scalegate.contract import atomic
from scalegate.gate.project import Project
from scalegate.plan import declare
from scalegate.plan.option_groups import Judging, Recorded
from scalegate.plan.option_types import output_dir, output_file
from scalegate.record import baselines, merge, runfiles

EXIT_OK, EXIT_REGRESSION = 0, 1


def _cases(run: str) -> list[dict]:
    return merge.cases(run)


def _baseline(cases: list[dict], path: str | None, directory: str | None):
    from scalegate.report import compare

    if path:
        return compare.load_baseline_file(Path(path))
    return baselines.load(Path(directory) if directory else Project.find().baselines, cases[0].get("profile", "?"))


def cmd_compare(args: argparse.Namespace) -> int:
    from scalegate.report import compare

    cases = _cases(args.run)
    baseline = _baseline(cases, args.baseline, args.baseline_dir)
    base = runfiles.load_run(Path(args.base_run)) if args.base_run else None
    rows = compare.compare(
        cases, baseline, args.tolerance, strict=args.strict, require_baseline=args.require_baseline, base=base
    )
    against = (
        compare.base_name(Path(args.base_run)) + " (A/B)"
        if args.base_run
        else baseline.path
        if baseline
        else "no baseline for " + cases[0].get("profile", "?")
    )
    title = f"{Path(args.run).resolve().name} vs {against}"
    parity = compare.parity_rows(Path(args.run), strict=args.strict)  # re-judged from their launches as well
    text = compare.markdown(rows, title, args.strict) + compare.parity_markdown(parity)
    print(text, end="")
    if args.markdown:
        atomic.write_text(Path(args.markdown), text)
    if args.json:
        data = compare.to_json(rows, args.run, baseline, args.strict)
        data["parity"] = [{k: p.get(k) for k in ("case_id", "status", "ratio", "problems", "launches")} for p in parity]
        atomic.write_text(Path(args.json), json.dumps(data, indent=2) + "\n")
    failed = any(r.failed(args.strict) for r in rows) or any(p.get("failed") for p in parity)
    return EXIT_REGRESSION if failed else EXIT_OK


def _base_run(args: argparse.Namespace) -> Path | None:
    """--base-run, else RUN/base where an A/B gate wrote the base commit's cases."""
    if args.base_run:
        return Path(args.base_run)
    found = Path(args.run) / "base"
    return found if found.is_dir() and runfiles.load_run(found) else None


def cmd_report(args: argparse.Namespace) -> int:
    from scalegate.report import compare, extrapolate, plots, run_page

    cases = _cases(args.run)
    baseline = _baseline(cases, args.baseline, args.baseline_dir)
    base_dir = _base_run(args)
    rows = compare.compare(cases, baseline, base=runfiles.load_run(base_dir) if base_dir else None)
    against = (
        f"{compare.base_name(base_dir)} (A/B)"
        if base_dir
        else str(baseline.path)
        if baseline
        else "no baseline for " + cases[0].get("profile", "?")
    )
    link = extrapolate.Link(bandwidth_gbit_s=args.bandwidth_gbit, latency_us=args.latency_us)
    out, run = Path(args.out) if args.out else Path(args.run) / "report", Path(args.run).resolve().name
    page = plots.write(cases, out, run, baseline, link, rows=rows, against=against if base_dir else "")
    html = run_page.write(out, cases, rows, run=run, against=against, notes=plots.projection(cases, link))
    print(f"report: {page}")
    print(f"interactive: {html}")
    for png in sorted(page.parent.glob("*.png")):
        print(f"plot: {png}")
    return EXIT_OK


def cmd_update(args: argparse.Namespace) -> int:
    from scalegate.record import update

    cases, directory = merge.merged_runs(args.run), Path(args.baseline_dir)
    if args.ledger_only:
        lines = update.ledgers_from_run(cases, directory)
    else:
        lines = update.update_from_run(cases, directory, args.tolerance, args.local_tolerance)
    for line in lines:
        print(line)
    return EXIT_OK


def add_parsers(sub) -> None:
    c = sub.add_parser("compare", help="judge a run against its baselines: markdown table, JSON, exit code")
    c.add_argument("run")
    c.add_argument("--baseline", help="a baseline file (default: baselines/<the run's profile>.json)")
    c.add_argument(
        "--baseline-dir",
        type=output_dir("--baseline-dir"),
        help="baseline directory (default: baselines/ of this checkout)",
    )
    c.add_argument("--json", type=output_file("--json"), help="also write the verdicts as JSON to this file")
    c.add_argument(
        "--markdown",
        type=output_file("--markdown"),
        help="also write the markdown table to this file (for a PR comment)",
    )
    declare.declare(c.add_argument, (Judging,), prefix="", only=("tolerance",))  # --scaling-tolerance's, unprefixed
    c.add_argument("--strict", "--scaling-strict", action="store_true", help="a noisy case fails too")
    c.add_argument(
        "--require-baseline",
        "--scaling-require-baseline",
        action="store_true",
        help="a case without a baseline fails too",
    )
    c.add_argument(
        "--base-run",
        help="A/B: judge RUN against this run of the base commit (an A/B gate writes it to "
        "RUN/base); the baseline file then lends only its spreads and tolerances",
    )
    c.set_defaults(handler=lambda args, extra: cmd_compare(args))
    r = sub.add_parser("report", help="PNG plots, a markdown page and an interactive index.html for a run")
    r.add_argument("run")
    r.add_argument("--out", type=output_dir("--out"), help="output directory (default: RUN/report)")
    r.add_argument(
        "--base-run",
        help="A/B: judge RUN against this run of the base commit (default: RUN/base where a gate wrote one)",
    )
    r.add_argument("--baseline")
    r.add_argument("--baseline-dir", type=output_dir("--baseline-dir"))
    r.add_argument("--bandwidth-gbit", type=float, default=100.0, help="projection link bandwidth (default: 100)")
    r.add_argument("--latency-us", type=float, default=5.0, help="projection latency per message (default: 5)")
    r.set_defaults(handler=lambda args, extra: cmd_report(args))
    u = sub.add_parser("update-baselines", help="write the run's measurements as baselines (atomic, with a diff)")
    u.add_argument(
        "run",
        nargs="+",
        help="one run, or several launches of the same cases: their spread becomes "
        "the baseline's noise (docs/detection.md: use 3 or more on shared machines)",
    )
    u.add_argument("--baseline-dir", default=str(Project.find().baselines), type=output_dir("--baseline-dir"))
    declare.declare(u.add_argument, (Recorded,), prefix="")  # checked as read, as record-baselines does
    u.add_argument(
        "--ledger-only",
        action="store_true",
        help="write only each case's collective ledger into its baseline entry, the rest as it was",
    )
    u.set_defaults(handler=lambda args, extra: cmd_update(args))
