"""The first four sets of docs/detection.md: the classic efficiency gate, replayed over their data files.

Kept so those tables stay reproducible from docs/detection-data*.jsonl; the shipped gate is measured by
benchmarks/detection.py.

    .venv/bin/python benchmarks/detection_legacy.py collect --reps 10 --out results/detection.jsonl
    .venv/bin/python benchmarks/detection_legacy.py analyse results/detection.jsonl

``collect`` runs, per repetition and in shuffled order: the single-process 1x1 reference, a clean
DDP 1x2 case, and the same case with every step made 5%, 10% and 20% slower
(``Faults.slowdown``). Every launch's step times are appended to a JSON-lines file, so an
interrupted collection keeps what it measured and a later ``collect`` adds to it.

``analyse`` replays the gate offline: each clean repetition in turn is the baseline (its efficiency
and noise, as ``update-baselines`` would record them) and every *other* repetition is judged
against it with ``scalegate.judge.metric.higher_is_better``. Clean candidates judged ``regressed`` are false
alarms; slowed candidates judged ``regressed`` are detections. ``noisy`` verdicts are counted apart
(they fail only under ``--scaling-strict``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scalegate import workloads  # noqa: E402
from scalegate.contract.errors import ScalegateError  # noqa: E402
from scalegate.contract.spec import CaseSpec, Faults  # noqa: E402
from scalegate.figures import stats  # noqa: E402
from scalegate.judge import metric as V  # noqa: E402
from scalegate.launch import run_case  # noqa: E402
from scalegate.record.baselines import Reference  # noqa: E402

SLOWDOWNS = (0.0, 0.05, 0.10, 0.20)


# Experiments of the first sets, kept here with the data they replay (the shipped gate does not use them).
def launch_noise(case: dict) -> float:
    """The relative half-width a baseline records as its noise (see ``merge_launches``)."""
    ci, value = case.get("efficiency_ci"), case.get("efficiency")
    if not ci or not value:
        return 0.0
    return max(value - ci[0], ci[1] - value) / value


def paired_efficiency_estimate(
    case_steps_s: Sequence[float],
    case_batch: int,
    ref_steps_s: Sequence[float],
    ref_batch: int,
    world_size: int,
    *,
    resamples: int = stats.RESAMPLES,
    seed: int = 0,
) -> stats.Estimate:
    """Efficiency from paired steps: reference step i ran right after case step i, in the same launch
    (the ``--scaling-paired`` experiment, commit 27da3b0, reverted; benchmarks/detection.py replays its data).

    The same as ``efficiency_estimate``, except that the bootstrap resamples *pairs*, so a machine phase
    that slowed both steps of a pair moves the two medians together and does not widen the interval.
    """
    if len(case_steps_s) != len(ref_steps_s):
        raise ValueError(f"{len(case_steps_s)} case steps but {len(ref_steps_s)} paired reference steps")
    value = stats._efficiency(case_steps_s, case_batch, ref_steps_s, ref_batch, world_size)
    if len(case_steps_s) < stats.MIN_VALUES:
        return stats.Estimate(value=value, low=0.0, high=math.inf)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(case_steps_s), size=(resamples, len(case_steps_s)))
    case_med = np.median(np.asarray(case_steps_s, dtype=float)[picks], axis=1)
    ref_med = np.median(np.asarray(ref_steps_s, dtype=float)[picks], axis=1)
    low, high = stats._interval((case_batch / case_med) / (ref_batch / ref_med) / world_size, stats.CONFIDENCE)
    return stats.Estimate(value=value, low=min(low, value), high=max(high, value))


def _spec(strategy: str, topology: str, slowdown: float, steps: int, warmup: int) -> CaseSpec:
    preset = workloads.preset("cnn", "tiny")
    return CaseSpec(
        strategy=strategy,
        model="cnn",
        preset="tiny",
        topology=topology,
        micro_batch=preset.micro_batch,
        steps=steps,
        warmup=warmup,
        faults=Faults(slowdown=slowdown),
    )


def collect(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(args.work)
    rng = random.Random(args.seed)
    for rep in range(args.reps):
        launches = [("reference", "single", "1x1", 0.0)] + [
            (f"slowdown={s:g}", "ddp", "1x2", s) for s in args.slowdowns
        ]
        rng.shuffle(launches)  # so slow drift of the machine's load does not line up with one condition
        for condition, strategy, topology, slowdown in launches:
            spec = _spec(strategy, topology, slowdown, args.steps, args.warmup)
            try:
                result = run_case(spec, work / f"{condition}-{rep}")
            except ScalegateError as exc:  # one failed launch must not end a long collection
                print(f"rep {rep} {condition}: launch failed, skipped: {exc.message}", flush=True)
                continue
            record = {
                "rep": f"{args.tag}{rep}",
                "condition": condition,
                "slowdown": slowdown,
                "world_size": spec.world_size,
                "global_batch": spec.global_batch_size,
                "step_times_s": result.step_times_s,
                "time": time.time(),
            }
            with out.open("a") as handle:
                handle.write(json.dumps(record) + "\n")
            print(f"rep {rep} {condition:>14}: median step {result.median_step_s * 1e3:.1f} ms", flush=True)


def _estimates(path: Path) -> dict[str, dict[float, stats.Estimate]]:
    """Per repetition, the efficiency estimate of each slowdown against that repetition's reference."""
    by_rep: dict[str, dict] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        by_rep.setdefault(record["rep"], {})[record["condition"]] = record
    out: dict[str, dict[float, stats.Estimate]] = {}
    for rep, records in by_rep.items():
        ref = records.get("reference")
        if ref is None:
            continue
        out[rep] = {}
        for record in records.values():
            if record["condition"] == "reference":
                continue
            out[rep][record["slowdown"]] = stats.efficiency_estimate(
                record["step_times_s"],
                record["global_batch"],
                ref["step_times_s"],
                ref["global_batch"],
                record["world_size"],
            )
    return out


def _baselines(estimates: dict[str, dict[float, stats.Estimate]], launches: int, seed: int = 0):
    """(repetitions used, Reference value, baseline noise) as update-baselines would record them."""
    clean = {rep: by[0.0] for rep, by in estimates.items() if 0.0 in by}
    if launches <= 1:
        return [({rep}, est.value, est.half_width_rel) for rep, est in clean.items()]
    rng, reps, out = random.Random(seed), sorted(clean), []
    for _ in range(max(len(reps), 40)):
        chosen = rng.sample(reps, min(launches, len(reps) - 1))
        runs = [{"efficiency": clean[r].value, "efficiency_ci": [clean[r].low, clean[r].high]} for r in chosen]
        merged = stats.merge_launches(runs)
        out.append((set(chosen), merged["efficiency"], launch_noise(merged)))
    return out


def judge_all(
    estimates: dict[str, dict[float, stats.Estimate]], tolerance: float, noisy_limit: float, launches: int = 1
) -> dict[float, dict[str, int]]:
    """Counts of verdicts per slowdown, over every (baseline, repetition not in that baseline) pair."""
    counts: dict[float, dict[str, int]] = {}
    for used, value, noise in _baselines(estimates, launches):
        reference = Reference(value=value, tolerance=tolerance)
        for rep, by_slowdown in estimates.items():
            if rep in used:
                continue
            for slowdown, est in by_slowdown.items():
                v = V.higher_is_better(est, reference, "detection", baseline_noise=noise, noisy_limit=noisy_limit)
                row = counts.setdefault(slowdown, {})
                row[v.status] = row.get(v.status, 0) + 1
    return counts


def table(counts: dict[float, dict[str, int]], tolerance: float, noisy_limit: float) -> str:
    lines = [
        f"tolerance {tolerance:.0%}, noisy above a ±{noisy_limit:.0%} interval",
        "| injected slowdown | efficiency drop | pairs | regressed | noisy | ok / improved | "
        "detection (regressed) | detection (strict: + noisy) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for slowdown in sorted(counts):
        row = counts[slowdown]
        n = sum(row.values())
        reg, noisy = row.get(V.REGRESSED, 0), row.get(V.NOISY, 0)
        label = "false alarms" if slowdown == 0 else "detection"
        lines.append(
            f"| {slowdown:.0%} | {1 - 1 / (1 + slowdown):.1%} | {n} | {reg} | {noisy} | {n - reg - noisy} | "
            f"{label} {reg / n:.1%} | {(reg + noisy) / n:.1%} |"
        )
    return "\n".join(lines)


def analyse(args: argparse.Namespace) -> None:
    estimates = _estimates(Path(args.data))
    print(f"{len(estimates)} repetitions from {args.data}")
    for rep, by_slowdown in sorted(estimates.items(), key=lambda kv: (len(kv[0]), kv[0])):
        cells = "  ".join(f"{s:.0%}: {e.value:.3f} ±{e.half_width_rel:.1%}" for s, e in sorted(by_slowdown.items()))
        print(f"  {rep}: {cells}")
    clean = [by[0.0].value for by in estimates.values() if 0.0 in by]
    if len(clean) >= 2:
        center = stats.median(clean)
        within = stats.median([by[0.0].half_width_rel for by in estimates.values() if 0.0 in by])
        print(
            f"clean efficiency across {len(clean)} launches: median {center:.3f}, range {min(clean):.3f}-"
            f"{max(clean):.3f}, between-launch sigma ~{1.4826 * stats.mad(clean) / center:.1%} (MAD-based); "
            f"median within-run 95% half-width {within:.1%}"
        )
    for tolerance in args.tolerances:
        print()
        print(f"baseline from {args.baseline_launches} launch(es)")
        print(
            table(
                judge_all(estimates, tolerance, args.noisy_limit, args.baseline_launches), tolerance, args.noisy_limit
            )
        )


def _launches(path: Path) -> dict[str, dict[str, dict]]:
    """Per repetition, its launches by condition ("reference", "slowdown=0.1", ...)."""
    by_rep: dict[str, dict[str, dict]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        by_rep.setdefault(record["rep"], {})[record["condition"]] = record
    return {rep: records for rep, records in by_rep.items() if "reference" in records}


def _launch_estimate(case: dict, ref_steps: list[float], ref_batch: int, paired: bool) -> stats.Estimate:
    if paired:  # the reverted --scaling-paired experiment (commit 27da3b0): reference steps timed in the launch
        return paired_efficiency_estimate(
            case["step_times_s"], case["global_batch"], case["paired_step_times_s"], ref_batch, case["world_size"]
        )
    return stats.efficiency_estimate(
        case["step_times_s"], case["global_batch"], ref_steps, ref_batch, case["world_size"]
    )


def _pooled(records: list[dict], slowdown: float, paired: bool = False) -> stats.Estimate:
    """What a session with ``--scaling-launches len(records)`` computes: every launch of the case
    against the reference launches pooled (or its own paired steps), then ``stats.pooled_estimate``."""
    ref_steps = [t for r in records for t in r["reference"]["step_times_s"]]
    ref_batch = records[0]["reference"]["global_batch"]
    cases = [r[f"slowdown={slowdown:g}"] for r in records]
    return stats.pooled_estimate([_launch_estimate(c, ref_steps, ref_batch, paired) for c in cases])


def simulate(args: argparse.Namespace) -> None:
    """Replay the whole gate as a session runs it: a baseline recorded by one run with ``M`` launches,
    a candidate run with ``N`` launches, and ``--scaling-confirm`` rounds of N fresh launches judged
    together with the first ones. Repetitions are drawn without overlap for each trial."""
    reps = _launches(Path(args.data))
    slowdowns = sorted({float(c.split("=")[1]) for r in reps.values() for c in r if c.startswith("slowdown=")})
    complete = [rep for rep, r in reps.items() if all(f"slowdown={s:g}" in r for s in slowdowns)]
    n, m, confirm = args.launches, args.baseline_launches, args.confirm
    need = m + n * (1 + confirm)
    if len(complete) < need:
        raise SystemExit(f"{len(complete)} complete repetitions; {need} are needed for M={m}, N={n}, confirm={confirm}")
    rng, paired = random.Random(args.seed), args.paired
    clean = [_pooled([reps[r]], 0.0, paired) for r in complete]
    values = [e.value for e in clean]
    center = stats.median(values)
    print(
        f"{len(complete)} repetitions ({'paired reference steps' if paired else 'reference launches'}): clean "
        f"efficiency median {center:.3f}, range {min(values):.3f}-{max(values):.3f}, between-launch sigma "
        f"~{1.4826 * stats.mad(values) / center:.1%}, median within-launch half-width "
        f"{stats.median([e.half_width_rel for e in clean]):.1%}"
    )
    print(
        f"baseline from {m} launch(es), candidate {n} launch(es), "
        f"confirm {confirm}, tolerance {args.tolerance:.0%}, {args.trials} trials per slowdown"
    )
    print("| injected slowdown | efficiency drop | regressed | noisy | ok / improved | launches per verdict (mean) |")
    print("|---|---|--:|--:|--:|--:|")
    for slowdown in slowdowns:
        counts, spent = {V.REGRESSED: 0, V.NOISY: 0, "other": 0}, 0
        for _ in range(args.trials):
            chosen = rng.sample(complete, need)
            base = _pooled([reps[r] for r in chosen[:m]], 0.0, paired)
            reference = Reference(value=base.value, tolerance=args.tolerance)
            used = m + n
            verdict = V.higher_is_better(
                _pooled([reps[r] for r in chosen[m:used]], slowdown, paired),
                reference,
                "simulate",
                baseline_noise=base.half_width_rel,
                noisy_limit=args.noisy_limit,
            )
            for _ in range(confirm):
                if verdict.status != V.REGRESSED:
                    break
                used += n
                verdict = V.higher_is_better(
                    _pooled([reps[r] for r in chosen[m:used]], slowdown, paired),
                    reference,
                    "simulate",
                    baseline_noise=base.half_width_rel,
                    noisy_limit=args.noisy_limit,
                )
            spent += used - m
            status = verdict.status if verdict.status in counts else "other"
            counts[status] += 1
        t = args.trials
        label = "false alarms" if slowdown == 0 else "detected"
        print(
            f"| {slowdown:.1%} | {1 - 1 / (1 + slowdown):.1%} | {label} {counts[V.REGRESSED] / t:.1%} | "
            f"{counts[V.NOISY] / t:.1%} | {counts['other'] / t:.1%} | {spent / t:.1f} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="launch the repetitions and append their step times")
    c.add_argument("--reps", type=int, default=10)
    c.add_argument("--steps", type=int, default=20)
    c.add_argument("--warmup", type=int, default=5)
    c.add_argument("--slowdowns", type=float, nargs="+", default=list(SLOWDOWNS))
    c.add_argument("--out", default="results/detection.jsonl")
    c.add_argument("--work", default="results/detection-runs")
    c.add_argument("--tag", default="", help="prefix for repetition names when appending a second collection")
    c.add_argument("--seed", type=int, default=0)
    a = sub.add_parser("analyse", help="replay the gate over the collected repetitions")
    a.add_argument("data")
    a.add_argument("--tolerances", type=float, nargs="+", default=[0.05, 0.10])
    a.add_argument("--noisy-limit", type=float, default=V.DEFAULT_NOISY_LIMIT)
    a.add_argument(
        "--baseline-launches",
        type=int,
        default=1,
        help="baseline = that many clean launches merged as `update-baselines RUN RUN ...` does",
    )
    g = sub.add_parser("simulate", help="replay the whole gate: M-launch baseline, N-launch candidate, confirmation")
    g.add_argument("data")
    g.add_argument("--tolerance", type=float, default=0.10)
    g.add_argument("--noisy-limit", type=float, default=V.DEFAULT_NOISY_LIMIT)
    g.add_argument("--launches", type=int, default=1, help="--scaling-launches of the judged run")
    g.add_argument("--baseline-launches", type=int, default=1, help="--scaling-launches of the run that recorded it")
    g.add_argument("--confirm", type=int, default=1, help="--scaling-confirm")
    g.add_argument("--trials", type=int, default=2000)
    g.add_argument(
        "--paired",
        action="store_true",
        help="judge against reference steps timed inside each launch (data of the reverted --scaling-paired "
        "experiment, docs/detection-data-paired.jsonl)",
    )
    g.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    {"collect": collect, "analyse": analyse, "simulate": simulate}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
