"""How often the A/B PR gate (``python -m scalegate gate --base REF``) catches a 10% drop, and how often it cries wolf.

    .venv/bin/python benchmarks/detection.py collect --ab --reps 40 --tag A --slowdowns 0 0.111 \\
        --strategies ddp fsdp deepspeed-zero2 parity --out results/detection-ab.jsonl
    .venv/bin/python benchmarks/detection_ab.py replay results/detection-ab.jsonl
    .venv/bin/python benchmarks/detection_ab.py gate-runs --runs 5 --out results/gate-runs-ab.jsonl

``collect --ab`` launches rounds as the gate does: every canary clean on the "base" side, clean and with every
distributed step 11.1% slower (a 10% drop of the local efficiency: ``Faults.slowdown``) on the "head" side, the
sides in alternating order by round, parity (self-paired) and the 1x1 reference with the head.

``replay`` is the gate's judge over those launches, exactly as ``gate --base`` calls it: per trial, rounds of
(base, head) launches handed to ``scalegate.judge.judge(head, stored, base=base)`` until it decides or the budget
is spent; the committed ``baselines/<profile>.json`` lends its spreads, as it does in the gate. Two ways to draw
the rounds: ``consecutive`` (the collection's own rounds from a random start: the time structure the gate has,
few distinct trials) and ``shuffled`` (rounds drawn without replacement: many trials, rounds independent). It
also replays the stored-baseline gate (no ``--base``) against the committed baselines, which were recorded on
another VM, to show what the A/B removes.

``gate-runs`` runs the whole command in a throwaway copy of this checkout with two commits: the base, and a head
that makes DDP's step wait ``--slow-ms`` on the host (a synchronous check a PR could add): A/A (``--base`` = the
head itself) and the slowed head against its base, alternating, with exit codes, verdicts, rounds and wall times.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import detection  # noqa: E402

from scalegate import policy
from scalegate.judge import CaseRecord, Conduct, estimates, judge  # noqa: E402
from scalegate.plan import hostinfo  # noqa: E402
from scalegate.record import baselines
from tests.repos import checkout_repo, commit_change, slow_commit

STATUSES = ("regressed", "noisy", "ok")


def _record(strategy: str, launches: list, budget: int, host: str = "") -> CaseRecord:
    """``host`` "": judged as if on the host that recorded the stored baseline; else on another one."""
    spec = detection.spec_for(strategy, 0.0)
    return CaseRecord(
        case_id=spec.case_id,
        key=f"{spec.case_id}:tiny",
        profile="replay",
        world_size=spec.world_size,
        global_batch=spec.global_batch_size,
        steps=spec.steps,
        warmup=spec.warmup,
        launches=tuple(launches),
        conduct=Conduct(max_launches=budget, tolerance=0.10),
        host=host,
    )


def _rounds(rows: list[dict], strategy: str, slowdown: float) -> list[tuple]:
    """(base launch, head launch) per collected round, in collection order."""
    base = {
        (r["tag"], r["rep"]): r["launch"]
        for r in rows
        if r["strategy"] == strategy and r["side"] == "base" and r["slowdown"] == 0.0
    }
    head = {
        (r["tag"], r["rep"]): r["launch"]
        for r in rows
        if r["strategy"] == strategy and r["side"] == "head" and r["slowdown"] == slowdown
    }
    return [(base[k], head[k]) for k in sorted(base.keys() & head.keys(), key=lambda k: (k[0], k[1]))]


def _one(strategy: str, rounds: list[tuple], stored, budget: int, base: bool = True, host: str = "") -> tuple[str, int]:
    """One gate verdict over ``rounds`` (in order): the status and the rounds it took."""
    outcome = None
    for n in range(1, min(budget, len(rounds)) + 1):
        head = _record(strategy, [h for _, h in rounds[:n]], budget, host)
        other = _record(strategy, [b for b, _ in rounds[:n]], budget) if base else None
        outcome = judge(head, stored, base=other)
        if not outcome.next_launches:
            return (outcome.status if outcome.status in STATUSES else "ok"), n
    return (outcome.status if outcome and outcome.status in STATUSES else "noisy"), n


def replay(args: argparse.Namespace) -> None:
    detection._memoize_estimates()
    rows = [r for r in detection._rows(Path(args.data))]
    stored = baselines.load(ROOT / "baselines", args.profile or hostinfo.detect().profile)
    rng = random.Random(args.seed)
    loads = [r["load1"] for r in rows]
    print(
        f"{len(rows)} launches from {args.data}; load average {min(loads):.2f}-{max(loads):.2f} (median "
        f"{statistics.median(loads):.2f}); budget {args.budget} rounds; spreads lent by {stored.path if stored else '-'}"
    )
    print(
        "| gate | case | head | draw | trials | regressed | noisy | ok | rounds per verdict (mean, max) | "
        "paired ln ratio: mean, sd |"
    )
    print("|---|---|---|---|--:|--:|--:|--:|--:|--:|")
    for strategy in [s for s in args.strategies if s != detection.PARITY]:
        for slowdown in sorted({r["slowdown"] for r in rows if r["strategy"] == strategy}):
            rounds = _rounds(rows, strategy, slowdown)
            if len(rounds) < 2:
                continue
            logs = [_ln(h) - _ln(b) for b, h in rounds]
            label = "clean" if slowdown == 0 else f"slowed {slowdown:.1%}"
            spread = f"{statistics.mean(logs):+.3f}, {statistics.stdev(logs):.3f}"
            starts = range(0, len(rounds) - args.budget + 1) if len(rounds) > args.budget else [0]
            draws = {
                "consecutive": [rounds[s:] for s in starts],
                "shuffled": [rng.sample(rounds, min(args.budget, len(rounds))) for _ in range(args.trials)],
            }
            for draw, trials in draws.items():
                _print_row(
                    "A/B", strategy, label, draw, [_one(strategy, t, stored, args.budget) for t in trials], spread
                )
            heads = [h for _, h in rounds]  # the stored-baseline gate on the same head launches
            trials = [[(None, h) for h in rng.sample(heads, min(args.budget, len(heads)))] for _ in range(args.trials)]
            _print_row(
                "stored, host spread ignored (until today)",
                strategy,
                label,
                "shuffled",
                [_one(strategy, t, stored, args.budget, base=False) for t in trials],
                "-",
            )
            _print_row(
                "stored, recorded on another VM (shipped)",
                strategy,
                label,
                "shuffled",
                [_one(strategy, t, stored, args.budget, base=False, host="replay#here") for t in trials],
                "-",
            )


def _ln(launch) -> float:
    return math.log(estimates.local(launch).value)


def _print_row(
    gate_kind: str, strategy: str, label: str, draw: str, results: list[tuple[str, int]], spread: str
) -> None:
    n = len(results)
    counts = {s: sum(1 for status, _ in results if status == s) for s in STATUSES}
    spent = [k for _, k in results]
    what = "false alarms" if label == "clean" else "detected"
    print(
        f"| {gate_kind} | `{detection.spec_for(strategy, 0.0).case_id}` | {label} | {draw} | {n} | "
        f"{what} {counts['regressed'] / n:.1%} | {counts['noisy'] / n:.1%} | {counts['ok'] / n:.1%} | "
        f"{statistics.mean(spent):.2f}, {max(spent)} | {spread} |"
    )


def _throwaway(work: Path, slow_ms: float) -> tuple[Path, str, str]:
    """A copy of this checkout as a repository of two commits: (its path, the base's hash, the slowed head's)."""
    repo = work / "repo"
    if repo.exists():
        subprocess.run(["rm", "-rf", str(repo)], check=True)
    base = checkout_repo(repo)
    return repo, base, commit_change(repo, f"head: DDP's step waits {slow_ms:g} ms on the host", slow_commit(slow_ms))


def gate_runs(args: argparse.Namespace) -> None:
    work = Path(args.work).resolve()
    repo, base, slow = _throwaway(work, args.slow_ms)
    conditions = [("A/A (head = base)", base, base), (f"head: DDP step +{args.slow_ms:g} ms", slow, base)]
    for run in range(args.runs):
        for label, head, against in conditions if run % 2 == 0 else conditions[::-1]:
            subprocess.run(["git", "checkout", "-q", head], cwd=repo, check=True)
            started = time.perf_counter()
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "scalegate",
                    "gate",
                    "--base",
                    against,
                    "--results-dir",
                    str(work / "gate"),
                    "--json",
                    str(work / "gate.json"),
                    *args.pytest_args,
                ],
                cwd=repo,
                capture_output=True,
                text=True,
            )
            wall = time.perf_counter() - started
            data = json.loads((work / "gate.json").read_text()) if done.returncode in (0, 1) else {}
            row = {
                "run": run,
                "condition": label,
                "exit": done.returncode,
                "wall_s": wall,
                "load1": os.getloadavg()[0],
                "time": time.time(),
                "cases": {c["case_id"]: [c["status"], c["launches"], c.get("delta")] for c in data.get("cases", [])},
                "parity": data.get("parity", []),
                "rounds": done.stdout.count("gate: round "),
            }
            with Path(args.out).open("a") as handle:
                handle.write(json.dumps(row) + "\n")
            print(
                f"run {run} {label}: exit {done.returncode}, {wall:.0f}s, {row['rounds']} rounds, {row['cases']}",
                flush=True,
            )
            if done.returncode not in (0, 1):
                print(done.stdout[-3000:], done.stderr[-3000:], flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("replay", help="the A/B gate's judge replayed over collect --ab launches")
    r.add_argument("data")
    r.add_argument("--strategies", nargs="+", default=list(detection.STRATEGIES))
    r.add_argument(
        "--budget", type=int, default=policy.GATE_MAX_LAUNCHES, help="rounds per verdict (default: the gate's)"
    )
    r.add_argument("--trials", type=int, default=2000)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--profile", help="the committed baseline file lending the spreads (default: this machine's)")
    g = sub.add_parser("gate-runs", help="`gate --base` on a throwaway repository: A/A and a commit that slows DDP")
    g.add_argument("--runs", type=int, default=5)
    g.add_argument("--slow-ms", type=float, default=3.0, help="host wait added to every DDP step (default: 3 ms)")
    g.add_argument("--out", default="results/gate-runs-ab.jsonl")
    g.add_argument("--work", default="results/gate-runs-ab")
    g.add_argument("pytest_args", nargs="*", help="passed to the gate after `--`")
    args = parser.parse_args(argv)
    {"replay": replay, "gate-runs": gate_runs}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
