"""Does ``history check`` find a real slowdown at the run it started, and nowhere else? N real runs measure it.

    .venv/bin/python -m benchmarks.history_series --runs 20 --inject-from 12              # ~10 min on 2 quiet cores
    .venv/bin/python -m benchmarks.history_series --runs 6 --inject-from 4 --work /tmp/hs # a quick try
    .venv/bin/python -m benchmarks.history_series --analyze-only --work results/history-series  # re-judge the runs
    .venv/bin/python -m benchmarks.history_series --runs 20 --inject-from 12 --strategies single,ddp  # a leaner run
    .venv/bin/python -m benchmarks.history_series --runs 20 --inject-from 8 --fix-from 14  # regressed, then fixed

Each run is one real ``pytest scaling_tests/test_scaling.py`` session (the CNN, ``single`` on 1x1 as the
control plus ``ddp`` and ``fsdp`` on 1x2, 10 measured steps after 2 warm-up steps, 10 same-launch pairs for
the local efficiency, one launch per case) into
``WORK/results/series-NNN``, added to a fresh history ``WORK/history.sqlite``. From run K (``--inject-from``,
counted from 0) on, every multi-rank step sleeps ``--slowdown`` of its own time (``--scaling-inject-slowdown``:
the single-process control and the local steps are untouched), so efficiency, local efficiency and throughput
of the 1x2 cases should change at run K, and nothing else anywhere: not memory, not bytes, not the control.
With ``--fix-from F`` the slowdown stops again at run F (a regression that a later commit fixed, the commonest
shape in a nightly history): those series should then hold two change points, a regression at K and an
improvement at F.

All runs come from one checkout, so each is recorded with a made-up commit ``<commit>+rNN`` and date
(day NN after 2026-01-01); the history keeps a note saying so. Then the shipped check judges the history
(``--min-effect``, default 5%, stands in for the baselines' tolerances, which would otherwise be this
machine's committed ones) and this script prints, per case and metric, the change points expected and found:
``hit`` (exactly the expected ones: a regression at K, and an improvement at F with ``--fix-from``), ``miss``,
``false`` (a change point where none was injected) or ``off`` (found, at the wrong run). ``WORK/summary.json``
keeps the table and each run's wall time; ``WORK/page/index.html`` is the history page.

Run time: one run took 56-90 s on the project's 2 cores while other jobs shared them (the quick try below,
three launches and the pytest session each); on a quiet machine expect less. Over budget, drop fsdp
(``--strategies single,ddp``) or shorten ``--local-steps``; check the first run's time before waiting for 20.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from scalegate.history import check, store
from scalegate.plan.hostinfo import commit

ROOT = Path(__file__).resolve().parents[1]

SLOWED = ("efficiency", "local_efficiency", "throughput", "mfu")  # MFU is throughput over a fixed count and peak


def one_run(args: argparse.Namespace, i: int, work: Path) -> dict:
    run_id = f"series-{i:03d}"
    slow = args.slowdown if args.inject_from <= i < (args.fix_from or args.runs) else 0.0
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        str(ROOT / "scaling_tests" / "test_scaling.py"),
        "--scaling-models",
        "cnn",
        "--scaling-strategies",
        args.strategies,
        "--scaling-topologies",
        "1x1,1x2",
        "-k",
        "single-cnn-1x1 or 1x2",  # the control and the 1x2 cases, not the other strategies' 1x1
        "--scaling-steps",
        str(args.steps),
        "--scaling-warmup",
        "2",
        "--scaling-max-launches",
        "1",
        "--scaling-local-steps",
        str(args.local_steps),
        "--scaling-results-dir",
        str(work / "results"),
        "--scaling-inject-slowdown",
        str(slow),
        *args.pytest_args,
    ]
    env = {**os.environ, "SCALEGATE_RUN_ID": run_id}
    env.pop("PYTEST_ADDOPTS", None)
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    (work / "logs").mkdir(exist_ok=True)
    (work / "logs" / f"{run_id}.log").write_text(done.stdout + done.stderr)
    date = (_dt.datetime(2026, 1, 1, 2, 17, tzinfo=_dt.timezone.utc) + _dt.timedelta(days=i)).isoformat()
    note = (
        f"synthetic series: commit and date set by benchmarks.history_series (all runs from {args.commit}); "
        f"slowdown {slow}"
    )
    added = subprocess.run(
        [
            sys.executable,
            "-m",
            "scalegate",
            "history",
            "add",
            str(work / "results" / run_id),
            "--db",
            str(work / "history.sqlite"),
            "--commit",
            f"{args.commit[:7]}+r{i:02d}",
            "--date",
            date,
            "--note",
            note,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    print(
        f"run {i:2d}: slowdown {slow:.2f}, pytest exit {done.returncode}, {wall:.0f} s; "
        f"{(added.stdout + added.stderr).strip()}",
        flush=True,
    )
    return {
        "run": run_id,
        "slowdown": slow,
        "pytest_exit": done.returncode,
        "wall_s": round(wall, 1),
        "added": added.returncode == 0,
    }


def outcome(v: check.SeriesVerdict, inject_from: int, fix_from: int | None, slowed_case: bool) -> tuple[str, str]:
    want = [(inject_from, check.REGRESSION)] + ([(fix_from, check.IMPROVEMENT)] if fix_from else [])
    expected = slowed_case and v.metric in SLOWED
    found = [(c.index, c.kind) for c in v.changes]
    if v.status == check.INSUFFICIENT:
        return ("change at %d" % inject_from if expected else "none"), "insufficient"
    if expected:
        return ", ".join(f"{k} at {i}" for i, k in want), "hit" if found == want else ("miss" if not found else "off")
    return "none", "ok" if not found else "false"


def judge(args: argparse.Namespace, work: Path) -> list[dict]:
    settings = check.Settings(min_effect=args.min_effect)
    with store.connect(work / "history.sqlite") as conn:
        verdicts = check.check(conn, baseline_dir=work / "no-baselines", settings=settings)
    from scalegate.history import dashboard

    dashboard.write(verdicts, work / "page", work / "history.sqlite", settings)
    rows = []
    print(f"\n{'case':22} {'metric':18} {'runs':>4}  {'expected':34} {'found':70} result")
    for v in verdicts:
        slowed_case = not v.case_id.startswith("single-")
        expected, result = outcome(v, args.inject_from, args.fix_from, slowed_case)
        found = ", ".join(f"{c.kind} at {c.index} ({c.effect:+.1%}, p={c.pvalue:.3f})" for c in v.changes) or "none"
        print(f"{v.case_key:22} {v.metric:18} {len(v.points):4}  {expected:34} {found:70} {result}")
        rows.append(
            {
                "case": v.case_key,
                "metric": v.metric,
                "runs": len(v.points),
                "expected": expected,
                "found": [
                    {"index": c.index, "kind": c.kind, "effect": c.effect, "pvalue": c.pvalue} for c in v.changes
                ],
                "result": result,
            }
        )
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--inject-from", type=int, default=12, help="first slowed run, counted from 0 (default: 12)")
    p.add_argument(
        "--fix-from", type=int, default=None, help="first run no longer slowed, counted from 0 (default: none)"
    )
    p.add_argument("--slowdown", type=float, default=0.2, help="fraction each multi-rank step is slowed (default: 0.2)")
    p.add_argument("--steps", type=int, default=10, help="measured steps per case (default: 10)")
    p.add_argument(
        "--local-steps",
        type=int,
        default=10,
        help="same-launch (distributed, local) step pairs behind the local efficiency (default: 10)",
    )
    p.add_argument("--strategies", default="single,ddp,fsdp")
    p.add_argument("--min-effect", type=float, default=0.05)
    p.add_argument("--work", default="results/history-series", help="where runs, history and page go")
    p.add_argument("--analyze-only", action="store_true", help="judge the history already in --work, run nothing")
    p.add_argument(
        "pytest_args",
        nargs="*",
        help="more pytest options for every run, after --, e.g. -- --scaling-launcher torchrun",
    )
    args = p.parse_args()
    if not 0 < args.inject_from < args.runs:
        p.error(f"--inject-from {args.inject_from} must be inside 1..{args.runs - 1}")
    if args.fix_from is not None and not args.inject_from < args.fix_from < args.runs:
        p.error(f"--fix-from {args.fix_from} must be inside {args.inject_from + 1}..{args.runs - 1}")
    args.commit = commit()
    work = Path(args.work).resolve()
    runs = []
    if not args.analyze_only:
        if (work / "history.sqlite").exists():
            p.error(f"{work}/history.sqlite exists: pass a fresh --work, or --analyze-only to judge it again")
        work.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        runs = [one_run(args, i, work) for i in range(args.runs)]
        print(f"{args.runs} runs in {time.monotonic() - start:.0f} s")
    rows = judge(args, work)
    bad = [r for r in rows if r["result"] not in ("hit", "ok")]
    print(
        f"\nhistory_series: {sum(r['result'] == 'hit' for r in rows)} hits, "
        f"{sum(r['result'] == 'ok' for r in rows)} quiet as expected, {len(bad)} not as expected"
        + (": " + "; ".join(f"{r['case']} {r['metric']} {r['result']}" for r in bad) if bad else "")
        + f"; page: {work / 'page' / 'index.html'}"
    )
    summary = {"settings": {k: v for k, v in vars(args).items()}, "runs": runs, "series": rows}
    (work / ("summary-analysis.json" if args.analyze_only else "summary.json")).write_text(
        json.dumps(summary, indent=2)
    )
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
