"""How often the shipped PR gate catches a slowdown, and how often it cries wolf, with real launches.

    .venv/bin/python -m experiments.detection collect --reps 40 --tag A --out results/detection.jsonl
    .venv/bin/python -m experiments.detection collect --reps 20 --tag B --slowdowns 0 --out results/detection.jsonl
    .venv/bin/python -m experiments.detection replay results/detection.jsonl --baseline-tag B --baseline-launches 10
    .venv/bin/python -m experiments.detection gate-runs --runs 5 --out results/gate-runs.jsonl

``collect`` launches the canary cases exactly as ``python -m scalegate gate`` builds them (``scalegate.plan.matrix``
with the gate's options: 20 measured steps after 5 warm-up steps, 40 same-launch pairs, the warm launcher),
clean and with every distributed step made slower (``Faults.slowdown``: each rank sleeps that fraction of
the step's own time; the local steps are untouched), plus a single-process reference launch per
repetition, in shuffled order. Each launch's judge record goes to a JSON-lines file with the load average.

``replay`` is the gate, replayed with the shipped code over those launches: a baseline recorded from
``--baseline-launches`` clean launches of one collection (``scalegate.record.update.local_entry``, as
``--scaling-update-baselines --scaling-launches M`` writes it), then, per trial, launches drawn without
replacement from another collection handed one at a time to ``scalegate.judge.judge`` until it decides or
the budget (``scalegate.policy.GATE_MAX_LAUNCHES``) is spent. Clean launches judged ``regressed`` are false alarms; slowed
ones, detections. It also reports the efficiency drop each injected slowdown really caused, by docs/concepts.md's
definition (classic efficiency, launches pooled) and on the local efficiency.

``gate-runs`` times the whole command (``python -m scalegate gate``) on the canaries, clean, with a slowdown
applied from outside the project (a sitecustomize making every DDP forward sleep), and with the harness's
own ``--scaling-inject-slowdown`` (every canary and parity's candidate), and records exit codes and verdicts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.ab_replay import PARITY, STRATEGIES, memoize_estimates, spec_for
from benchmarks.ab_replay import rows as read_rows
from scalegate import policy
from scalegate.contract.errors import ScalegateError
from scalegate.contract.spec import CaseSpec
from scalegate.figures import resources
from scalegate.judge import CaseRecord, Conduct, LaunchRecord, estimates, judge
from scalegate.judge.evidence import launch_record
from scalegate.launch import run_case, warm
from scalegate.record import update
from scalegate.record.baselines import BaselineFile
from tests.repos import SLOW_DDP

ROOT = Path(__file__).resolve().parents[1]
SLOWDOWNS = (0.0, 0.093, 0.111)


def collect(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    agents = warm.pool(log_dir=Path(args.work))
    try:
        for rep in range(args.reps):
            todo = _ab_order(args, rep, rng) if args.ab else _shuffled(args, rng)
            for strategy, slowdown, side in todo:
                spec = spec_for(strategy, slowdown)
                started = time.perf_counter()
                try:
                    result = run_case(
                        spec, Path(args.work) / f"{args.tag}{rep}-{spec.case_id}-{slowdown:g}", agents=agents
                    )
                except ScalegateError as exc:  # one failed launch must not end a long collection
                    print(
                        f"{args.tag}{rep} {spec.case_id} {slowdown:g}: launch failed, skipped: {exc.message}",
                        flush=True,
                    )
                    continue
                launch = launch_record(result, resources.wire(result))
                if strategy == PARITY:  # the companion's steps ride in the pairs' place: (fabric, ddp) step i
                    launch = dataclasses.replace(
                        launch,
                        pair_step_times_s=tuple(result.step_times_s),
                        local_step_times_s=tuple(result.companion_step_times_s),
                    )
                row = {
                    "tag": args.tag,
                    "rep": rep,
                    "strategy": strategy,
                    "slowdown": slowdown,
                    "side": side,
                    "global_batch": spec.global_batch_size,
                    "world_size": spec.world_size,
                    "launch": {k: list(v) if isinstance(v, tuple) else v for k, v in launch.__dict__.items()},
                    "wall_s": time.perf_counter() - started,
                    "load1": os.getloadavg()[0],
                    "time": time.time(),
                }
                with out.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")
                local = estimates.local(launch)
                print(
                    f"{args.tag}{rep} {side:4} {spec.case_id:22} slowdown {slowdown:<5g} median step "
                    f"{statistics.median(launch.step_times_s) * 1e3:6.1f} ms, local eff "
                    f"{local.value if local else float('nan'):.3f}, wall {row['wall_s']:.1f}s, "
                    f"load {row['load1']:.2f}",
                    flush=True,
                )
    finally:
        agents.close()


def _shuffled(args: argparse.Namespace, rng: random.Random) -> list[tuple[str, float, str]]:
    """Every condition once. Slow drift of the machine must not line up with one condition: shuffled, but grouped by
    the warm agent a case needs (DeepSpeed, Lightning preloaded or not), in a random group order, so the agent is
    not restarted between every two launches."""
    todo = ([("single", 0.0, "head")] if args.reference else []) + [
        (s, d, "head") for s in args.strategies for d in args.slowdowns
    ]
    groups = sorted({warm.modules_for(spec_for(s, 0.0)) for s, _, _ in todo}, key=lambda _: rng.random())
    rng.shuffle(todo)
    todo.sort(key=lambda c: groups.index(warm.modules_for(spec_for(c[0], 0.0))))
    return todo


def _ab_order(args: argparse.Namespace, rep: int, rng: random.Random) -> list[tuple[str, float, str]]:
    """One round of the A/B gate (``gate --base``): every case clean on the base side, then clean and slowed on the
    head side (their order drawn), the sides in alternating order by round as the gate runs them; parity (which
    pairs its own front ends) and the reference with the head."""
    cases = [s for s in args.strategies if s != PARITY]
    base = [(s, 0.0, "base") for s in cases]
    head = [(s, d, "head") for s in cases for d in sorted(args.slowdowns, key=lambda _: rng.random())]
    head = (
        ([("single", 0.0, "head")] if args.reference else [])
        + head
        + [(PARITY, d, "head") for d in args.slowdowns if PARITY in args.strategies]
    )
    return base + head if rep % 2 == 0 else head + base


def _record(
    strategy: str,
    launches: list[LaunchRecord],
    references: list[LaunchRecord],
    spec: CaseSpec,
    max_launches: int = policy.GATE_MAX_LAUNCHES,
) -> CaseRecord:
    return CaseRecord(
        case_id=spec.case_id,
        key=f"{spec.case_id}:tiny",
        profile="replay",
        world_size=spec.world_size,
        global_batch=spec.global_batch_size,
        steps=spec.run.steps,
        warmup=spec.run.warmup,
        launches=tuple(launches),
        reference_step_times_s=tuple(t for r in references for t in r.step_times_s),
        reference_global_batch=spec_for("single", 0.0).global_batch_size,
        reference_launches=len(references),
        conduct=Conduct(max_launches=max_launches),
    )


def _baseline(key: str, values: list[float]) -> BaselineFile:
    return BaselineFile(
        path=Path("replay.json"),
        profile="replay",
        fingerprint={},
        cases={key: {"local_efficiency": update.local_entry(values)}},
    )


def _drops(rows: list[dict], strategy: str, slowdowns: list[float]) -> dict[float, tuple[float, float]]:
    """The efficiency drop each slowdown caused: docs/concepts.md's (pooled steps, pooled reference) and the local one."""
    ref = [t for r in rows if r["strategy"] == "single" for t in r["launch"].step_times_s]
    out = {}
    base = None
    for slowdown in slowdowns:
        mine = [r["launch"] for r in rows if r["strategy"] == strategy and r["slowdown"] == slowdown]
        classic = statistics.median(ref) / statistics.median([t for m in mine for t in m.step_times_s])
        local = math.exp(statistics.mean(math.log(estimates.local(m).value) for m in mine))
        if slowdown == 0.0:
            base = (classic, local)
        out[slowdown] = (1 - classic / base[0], 1 - local / base[1]) if base else (math.nan, math.nan)
    return out


def _first_pairs(rows: list[dict], pairs: int) -> None:
    """What fewer same-launch pairs would have given: each launch's first ``pairs`` pairs."""
    for row in rows:
        launch = row["launch"]
        if launch.pair_step_times_s:
            row["launch"] = dataclasses.replace(
                launch,
                pair_step_times_s=launch.pair_step_times_s[:pairs],
                local_step_times_s=launch.local_step_times_s[:pairs],
            )


def replay(args: argparse.Namespace) -> None:
    memoize_estimates()
    rows = read_rows(Path(args.data))
    if args.pairs:
        _first_pairs(rows, args.pairs)
    budget = args.max_launches or policy.GATE_MAX_LAUNCHES
    rng = random.Random(args.seed)
    loads = [r["load1"] for r in rows]
    print(
        f"{len(rows)} launches from {args.data}; load average {min(loads):.2f}-{max(loads):.2f} "
        f"(median {statistics.median(loads):.2f}); gate budget {budget} launches"
        + (f"; only the first {args.pairs} pairs of each launch" if args.pairs else "")
    )
    print(
        "| case | injected slowdown | efficiency drop (concepts) | local efficiency drop | trials | regressed | "
        "noisy | ok | launches per verdict (mean, max) |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for strategy in args.strategies:
        if strategy == PARITY:
            _parity_rows(rows, args, budget)
            continue
        spec = spec_for(strategy, 0.0)
        key = f"{spec.case_id}:tiny"
        base_pool = [
            r for r in rows if r["strategy"] == strategy and r["slowdown"] == 0.0 and r["tag"] in args.baseline_tag
        ]
        slowdowns = sorted({r["slowdown"] for r in rows if r["strategy"] == strategy})
        drops = _drops(
            [r for r in rows if r["tag"] in args.judge_tag or r["strategy"] == "single"], strategy, slowdowns
        )
        references = [r["launch"] for r in rows if r["strategy"] == "single" and r["tag"] in args.judge_tag]
        for slowdown in slowdowns:
            pool = [
                r
                for r in rows
                if r["strategy"] == strategy and r["slowdown"] == slowdown and r["tag"] in args.judge_tag
            ]
            counts, spent = {"regressed": 0, "noisy": 0, "ok": 0}, []
            for _ in range(args.trials):
                chosen_base = rng.sample(base_pool, args.baseline_launches)
                baseline = _baseline(key, [estimates.local(r["launch"]).value for r in chosen_base])
                candidates = [r for r in pool if r not in chosen_base]
                order = rng.sample(candidates, min(budget, len(candidates)))
                launches = []
                for row in order:
                    launches.append(row["launch"])
                    outcome = judge(_record(strategy, launches, rng.sample(references, 1), spec, budget), baseline)
                    if not outcome.next_launches:
                        break
                counts[outcome.status if outcome.status in counts else "ok"] += 1
                spent.append(len(launches))
            n = args.trials
            classic, local = drops[slowdown]
            print(
                f"| `{spec.case_id}` | {slowdown:.1%} | {classic:.1%} | {local:.1%} | {n} | "
                f"{'false alarms' if slowdown == 0 else 'detected'} {counts['regressed'] / n:.1%} | "
                f"{counts['noisy'] / n:.1%} | {counts['ok'] / n:.1%} | {statistics.mean(spent):.2f}, {max(spent)} |"
            )
    for strategy in args.strategies:
        values = [estimates.local(r["launch"]).value for r in rows if r["strategy"] == strategy and r["slowdown"] == 0]
        by_tag = {
            t: [
                estimates.local(r["launch"]).value
                for r in rows
                if r["strategy"] == strategy and r["slowdown"] == 0 and r["tag"] == t
            ]
            for t in sorted({r["tag"] for r in rows})
        }
        logs = [math.log(v) for v in values]
        print(
            f"{strategy}: clean local efficiency over {len(values)} launches: median {statistics.median(values):.3f}, "
            f"sd(ln) {statistics.stdev(logs):.3f}; per collection: "
            + ", ".join(f"{t} {statistics.median(v):.3f} (n={len(v)})" for t, v in by_tag.items() if v)
        )


def _parity_rows(rows: list[dict], args: argparse.Namespace, budget: int) -> None:
    """Parity's sequential test replayed: launches drawn without replacement, each one's paired ratio handed to
    ``scalegate.parity_judge.decide`` until it decides or the budget is spent (no baseline: ratio 1 is exact)."""
    from scalegate.figures import stats
    from scalegate.judge import parity as parity_judge
    from scalegate.judge import sequential

    rng = random.Random(args.seed)
    design = sequential.Design(max_launches=budget)
    for slowdown in sorted({r["slowdown"] for r in rows if r["strategy"] == PARITY}):
        mine = [r["launch"] for r in rows if r["strategy"] == PARITY and r["slowdown"] == slowdown]  # no baseline
        ratios = [stats.paired_ratio_estimate(m.local_step_times_s, m.pair_step_times_s) for m in mine]
        counts, spent = {sequential.REGRESSED: 0, sequential.UNDECIDED: 0, sequential.OK: 0}, []
        for _ in range(args.trials):
            order = rng.sample(ratios, min(budget, len(ratios)))
            for n in range(1, len(order) + 1):
                found = parity_judge.decide(order[:n], policy.PARITY_TOLERANCE, design)
                if found.decided:
                    break
            counts[found.status] += 1
            spent.append(n)
        logs = [math.log(e.value) for e in ratios]
        n = args.trials
        print(
            f"| `parity-fabric-ddp-vs-ddp-cnn-1x2` | {slowdown:.1%} | fabric/ddp throughput "
            f"{math.exp(statistics.mean(logs)):.3f} (sd(ln) {statistics.stdev(logs):.3f}, {len(mine)} launches) | - | "
            f"{n} | {'false alarms' if slowdown == 0 else 'detected'} {counts[sequential.REGRESSED] / n:.1%} | "
            f"{counts[sequential.UNDECIDED] / n:.1%} | {counts[sequential.OK] / n:.1%} | "
            f"{statistics.mean(spent):.2f}, {max(spent)} |"
        )


def gate_runs(args: argparse.Namespace) -> None:
    """The whole gate command, timed; clean and with an outside slowdown of every DDP forward."""
    site = Path(args.work) / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(SLOW_DDP)
    conditions = [
        ("clean", {}, []),
        (f"ddp forward +{args.slow_ms:g} ms", {"PYTHONPATH": str(site), "SLOW_DDP_MS": str(args.slow_ms)}, []),
    ]
    if args.inject:  # the harness's own fault injection: every multi-rank case (parity: the candidate) slowed
        conditions.append(
            (f"--scaling-inject-slowdown {args.inject:g}", {}, ["--scaling-inject-slowdown", str(args.inject)])
        )
    for run in range(args.runs):
        for label, env, extra in conditions:
            started = time.perf_counter()
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "scalegate",
                    "gate",
                    "--results-dir",
                    str(Path(args.work) / "gate"),
                    "--json",
                    str(Path(args.work) / "gate.json"),
                    *args.pytest_args,
                    *extra,
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
                env={**os.environ, **env},
            )
            wall = time.perf_counter() - started
            data = json.loads((Path(args.work) / "gate.json").read_text()) if done.returncode in (0, 1) else {}
            row = {
                "run": run,
                "condition": label,
                "exit": done.returncode,
                "wall_s": wall,
                "load1": os.getloadavg()[0],
                "cases": {c["case_id"]: [c["status"], c["launches"]] for c in data.get("cases", [])},
                "parity": data.get("parity", []),
            }
            with Path(args.out).open("a") as handle:
                handle.write(json.dumps(row) + "\n")
            print(f"run {run} {label}: exit {done.returncode}, {wall:.0f}s, {row['cases']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="launch the canaries clean and slowed; append every launch's record")
    c.add_argument("--reps", type=int, default=40)
    c.add_argument("--strategies", nargs="+", default=list(STRATEGIES))
    c.add_argument("--slowdowns", type=float, nargs="+", default=list(SLOWDOWNS))
    c.add_argument("--tag", default="A", help="names this collection (a baseline comes from another one)")
    c.add_argument(
        "--no-reference",
        dest="reference",
        action="store_false",
        help="no single-process reference launch per repetition (parity needs none)",
    )
    c.add_argument("--out", default="results/detection.jsonl")
    c.add_argument("--work", default="results/detection-runs")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument(
        "--ab",
        action="store_true",
        help="rounds as `gate --base` runs them: a clean base launch of every "
        "case beside the head's clean and slowed ones (detection_ab.py)",
    )
    r = sub.add_parser("replay", help="replay the shipped gate over the collected launches")
    r.add_argument("data")
    r.add_argument("--strategies", nargs="+", default=list(STRATEGIES))
    r.add_argument("--baseline-tag", nargs="+", default=["B"], help="collections the baselines are drawn from")
    r.add_argument("--judge-tag", nargs="+", default=["A"], help="collections the judged launches are drawn from")
    r.add_argument("--baseline-launches", type=int, default=10)
    r.add_argument("--trials", type=int, default=2000)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--max-launches", type=int, default=0, help="another budget than the gate's (what-if)")
    r.add_argument("--pairs", type=int, default=0, help="judge only each launch's first N pairs (what-if)")
    g = sub.add_parser("gate-runs", help="time `python -m scalegate gate`, clean and with an outside slowdown")
    g.add_argument("--runs", type=int, default=5)
    g.add_argument("--slow-ms", type=float, default=4.0, help="sleep added to every DDP forward (default: 4 ms)")
    g.add_argument(
        "--inject",
        type=float,
        default=0.111,
        help="a third condition with --scaling-inject-slowdown INJECT (0: off; default: a 10%% drop)",
    )
    g.add_argument("--out", default="results/gate-runs.jsonl")
    g.add_argument("--work", default="results/gate-runs")
    g.add_argument("pytest_args", nargs="*", help="passed to the gate after `--`")
    args = parser.parse_args(argv)
    {"collect": collect, "replay": replay, "gate-runs": gate_runs}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
