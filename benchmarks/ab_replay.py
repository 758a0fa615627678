"""The A/B gate's judge replayed over recorded rounds: how often it catches a drop, how often it cries wolf.

    .venv/bin/python -m benchmarks.ab_replay                                   # the recorded rounds (below)
    .venv/bin/python -m benchmarks.ab_replay results/detection-ab.jsonl --trials 500

The data are rounds launched as ``gate --base`` launches them when it does not pair steps (the ``rounds``
pairing): per round one launch of each canary on the "base" side, clean, and one on the "head" side, clean and with
every distributed step 11.1% slower (``Faults.slowdown``: a 10% drop of the local efficiency), the sides in
alternating order by round. ``experiments/detection.py collect --ab`` collected the default file,
experiments/data/detection-data-ab.jsonl (32 rounds a canary; how: experiments/README.md).

Per trial, rounds of (base, head) launches go to ``scalegate.judge.judge(head, stored, base=base)`` one round at a
time, exactly as the gate hands them over, until it decides or the budget is spent; the committed
``baselines/<profile>.json`` lends its spreads, as it does in the gate. Two draws: ``consecutive`` (the collection's
own rounds from each start: the time structure a gate has, few distinct trials) and ``shuffled`` (rounds drawn
without replacement). It also replays the stored-baseline gate (no ``--base``) on the same head launches, as if
recorded on this host and as recorded on another one. Nothing is timed here: it runs at any load. tests/test_ab_replay.py
runs it over the recorded rounds.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

from scalegate import policy, workloads
from scalegate.contract.faults import Faults
from scalegate.contract.spec import CaseSpec
from scalegate.judge import CaseRecord, Conduct, LaunchRecord, estimates, judge
from scalegate.plan import hostinfo
from scalegate.record import baselines

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "experiments" / "data" / "detection-data-ab.jsonl"
STRATEGIES = ("ddp", "fsdp", "deepspeed-zero2")
PARITY = "parity"  # parity-fabric-ddp-vs-ddp-cnn-1x2: fabric-ddp with ddp as its companion (scalegate/parity.py)
STATUSES = ("regressed", "noisy", "ok")


def spec_for(strategy: str, slowdown: float) -> CaseSpec:
    """The canary as the gate builds it on this machine (cnn, tiny preset, 1x2; 1x1 for the reference)."""
    preset = workloads.preset("cnn", "tiny")
    if strategy == PARITY:  # the slowdown reaches the candidate (Fabric) only, never its companion
        return CaseSpec.of(
            strategy="fabric-ddp",
            companion="ddp",
            model="cnn",
            preset="tiny",
            topology="1x2",
            micro_batch=preset.micro_batch,
            faults=Faults(slowdown=slowdown),
        )
    return CaseSpec.of(
        strategy=strategy,
        model="cnn",
        preset="tiny",
        topology="1x1" if strategy == "single" else "1x2",
        micro_batch=preset.micro_batch,
        local_steps=0 if strategy == "single" else policy.LOCAL_STEPS,
        faults=Faults(slowdown=slowdown),
    )


def rows(path: Path) -> list[dict]:
    """Every recorded launch: its strategy, slowdown, side, collection tag and repetition, and its judge record."""
    out = []
    for line in Path(path).read_text().splitlines():
        row = json.loads(line)
        row["launch"] = LaunchRecord(**{k: tuple(v) if isinstance(v, list) else v for k, v in row["launch"].items()})
        row.setdefault("side", "head")
        out.append(row)
    return out


def memoize_estimates() -> tuple:
    """The judge re-estimates every launch (a bootstrap each) at every look; a replay makes millions of looks.
    Same functions, same values, computed once per launch object (and reference). Returns the originals, to put
    back. Keyed by identity (a record holds dicts, so it does not hash); each entry keeps its launch alive, so an
    identity is never reused for another one."""
    local, classic = estimates.local, estimates.classic
    seen: dict = {}

    def once(key: tuple, held: tuple, compute):
        found = seen.get(key)
        if found is None or any(a is not b for a, b in zip(found[0], held)):
            found = seen[key] = (held, compute())
        return found[1]

    def local_once(launch: LaunchRecord):
        return once(("local", id(launch)), (launch,), lambda: local(launch))

    def classic_once(rec: CaseRecord, launch: LaunchRecord):
        reference = rec.reference_step_times_s
        key = ("classic", id(launch), id(reference), rec.global_batch, rec.reference_global_batch, rec.world_size)
        return once(key, (launch, reference), lambda: classic(rec, launch))

    estimates.local, estimates.classic = local_once, classic_once
    return local, classic


def record(strategy: str, launches: list, budget: int, host: str = "") -> CaseRecord:
    """One side's launches of a canary as the judge reads them; ``host`` "": judged as if on the host that recorded
    the stored baseline, else on another one."""
    spec = spec_for(strategy, 0.0)
    return CaseRecord(
        case_id=spec.case_id,
        key=f"{spec.case_id}:tiny",
        profile="replay",
        world_size=spec.world_size,
        global_batch=spec.global_batch_size,
        steps=spec.run.steps,
        warmup=spec.run.warmup,
        launches=tuple(launches),
        conduct=Conduct(max_launches=budget, tolerance=0.10),
        host=host,
    )


def rounds(found: list[dict], strategy: str, slowdown: float) -> list[tuple]:
    """(base launch, head launch) per recorded round, in the order they were collected."""
    base = {
        (r["tag"], r["rep"]): r["launch"]
        for r in found
        if r["strategy"] == strategy and r["side"] == "base" and r["slowdown"] == 0.0
    }
    head = {
        (r["tag"], r["rep"]): r["launch"]
        for r in found
        if r["strategy"] == strategy and r["side"] == "head" and r["slowdown"] == slowdown
    }
    return [(base[k], head[k]) for k in sorted(base.keys() & head.keys())]


def verdict(
    strategy: str, trial: list[tuple], stored, budget: int, base: bool = True, host: str = ""
) -> tuple[str, int]:
    """One gate's verdict over ``trial``'s rounds, in order: its status and the rounds it took."""
    outcome, n = None, 0
    for n in range(1, min(budget, len(trial)) + 1):
        head = record(strategy, [h for _, h in trial[:n]], budget, host)
        other = record(strategy, [b for b, _ in trial[:n]], budget) if base else None
        outcome = judge(head, stored, base=other)
        if not outcome.next_launches:
            return (outcome.status if outcome.status in STATUSES else "ok"), n
    return (outcome.status if outcome and outcome.status in STATUSES else "noisy"), n


def _ln(launch: LaunchRecord) -> float:
    return math.log(estimates.local(launch).value)


def _row(gate: str, strategy: str, label: str, draw: str, results: list[tuple[str, int]], spread: str) -> str:
    n = len(results)
    counts = {s: sum(1 for status, _ in results if status == s) for s in STATUSES}
    spent = [k for _, k in results]
    what = "false alarms" if label == "clean" else "detected"
    return (
        f"| {gate} | `{spec_for(strategy, 0.0).case_id}` | {label} | {draw} | {n} | "
        f"{what} {counts['regressed'] / n:.1%} | {counts['noisy'] / n:.1%} | {counts['ok'] / n:.1%} | "
        f"{statistics.mean(spent):.2f}, {max(spent)} | {spread} |"
    )


def replay(args: argparse.Namespace) -> None:
    memoize_estimates()
    found = rows(Path(args.data))
    stored = baselines.load(ROOT / "baselines", args.profile or hostinfo.detect().profile)
    rng = random.Random(args.seed)
    loads = [r["load1"] for r in found]
    print(
        f"{len(found)} launches from {args.data}; load average {min(loads):.2f}-{max(loads):.2f} (median "
        f"{statistics.median(loads):.2f}); budget {args.budget} rounds; spreads lent by {stored.path if stored else '-'}"
    )
    print(
        "| gate | case | head | draw | trials | regressed | noisy | ok | rounds per verdict (mean, max) | "
        "paired ln ratio: mean, sd |"
    )
    print("|---|---|---|---|--:|--:|--:|--:|--:|--:|")
    for strategy in [s for s in args.strategies if s != PARITY]:
        for slowdown in sorted({r["slowdown"] for r in found if r["strategy"] == strategy}):
            paired = rounds(found, strategy, slowdown)
            if len(paired) < 2:
                continue
            logs = [_ln(h) - _ln(b) for b, h in paired]
            label = "clean" if slowdown == 0 else f"slowed {slowdown:.1%}"
            spread = f"{statistics.mean(logs):+.3f}, {statistics.stdev(logs):.3f}"
            starts = range(0, len(paired) - args.budget + 1) if len(paired) > args.budget else [0]
            draws = {
                "consecutive": [paired[s:] for s in starts],
                "shuffled": [rng.sample(paired, min(args.budget, len(paired))) for _ in range(args.trials)],
            }
            for draw, trials in draws.items():
                print(
                    _row(
                        "A/B",
                        strategy,
                        label,
                        draw,
                        [verdict(strategy, t, stored, args.budget) for t in trials],
                        spread,
                    )
                )
            heads = [h for _, h in paired]  # the stored-baseline gate on the same head launches
            trials = [[(None, h) for h in rng.sample(heads, min(args.budget, len(heads)))] for _ in range(args.trials)]
            for gate, host in (
                ("stored, recorded on this host", ""),
                ("stored, recorded on another host", "replay#here"),
            ):
                results = [verdict(strategy, t, stored, args.budget, base=False, host=host) for t in trials]
                print(_row(gate, strategy, label, "shuffled", results, "-"))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.ab_replay", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("data", nargs="?", default=str(DATA), help="recorded rounds (default: %(default)s)")
    p.add_argument("--strategies", nargs="+", default=list(STRATEGIES))
    p.add_argument(
        "--budget", type=int, default=policy.GATE_MAX_LAUNCHES, help="rounds per verdict (default: the gate's)"
    )
    p.add_argument("--trials", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", help="the committed baseline file lending the spreads (default: this machine's)")
    return p


def main(argv: list[str] | None = None) -> int:
    replay(parser().parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
