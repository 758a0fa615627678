"""The duet gate's detection by replay over recorded duet rounds (docs/duet.md; the figures: docs/evidence/duet.md).

    python -m benchmarks.duet_replay                       # every set in experiments/data/detection-data-duet.jsonl
    python -m benchmarks.duet_replay --tolerance 0.05 --gates 20000
    python -m benchmarks.duet_replay --data experiments/data/detection-data-duet-bias.jsonl --floor 0.02   # forced A/A rounds
    python -m benchmarks.duet_replay --parity --only fifteenth   # odd rounds from odd ones, as the gate alternates
    python -m benchmarks.duet_replay --by-run --data FILE        # each replayed gate keeps one recorded run's level

A *set* is the rounds of one kind of whole-command run of experiments/duet_aa.py (case, head change, steps, note).
Each replayed gate draws rounds at random, with replacement, from one set and runs the judge's own sequential
test over them round by round (``judge.duet_floors.sigma_of``, ``sequential.decide``, the gate's design: the drop to catch
``--tolerance``, alpha 1%, beta 5%, ``--budget`` rounds, two rounds before either verdict), exactly as
``judge.duet.timing`` decides a gate. From an A/A set it reads the false alarms, and, with every round's efficiency
log ratio shifted by ``ln(1 - drop)``, the power at that drop; from a set whose head was really slowed it reads the
power on those rounds as measured. The sigma floor is the judge's for the rounds' pairing (``RECORDED_AA``, or
``RECORDED_AA_SWAP``, ``RECORDED_AA_ALTERNATE``) unless ``--floor`` names one.

Rounds drawn independently: a gate's own rounds share more than that (one afternoon's host, one pair of trees), so a
whole-command run (experiments/duet_aa.py) is the check on this; the two are reported side by side in
docs/evidence/duet.md. ``--by-run`` keeps that share: each line of the data is a run (a gate, or a run of forced
rounds), and a replayed gate takes one run's level (its mean, less the share its rounds' own noise explains:
``by_run``) and adds to it, round by round, a residual drawn from every run's rounds less their own run's mean. A
real gate also alternates the side that turns first by round, so its first two rounds always hold one of each order;
where a set's odd and even rounds read apart (the fifteenth set's fsdp A/A: -1.53% and +1.17%), drawing from all
of them pairs two rounds of one order more often than a gate can. ``--parity`` draws round n from the rounds of
n's parity instead.
Nothing is timed here: it runs at any load.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
from pathlib import Path

from scalegate import policy
from scalegate.judge import duet_floors, sequential

ROOT = Path(__file__).resolve().parents[1]


def sets(path: Path) -> dict[tuple, list[dict]]:
    """Paired rounds by set: (kind, strategy, head change, script steps, note)."""
    out: dict[tuple, list[dict]] = {}
    for number, line in enumerate(path.read_text().splitlines()):
        run = json.loads(line)
        if run.get("invalid"):  # kept in the data with the reason, never replayed
            continue
        change = (
            f"slow {run['slow_ms']} ms"
            if run.get("slow_ms")
            else f"slowdown {run['slowdown']}"
            if run.get("slowdown")
            else f"extra forward {run['extra_forward']}"
            if run.get("extra_forward")
            else "A/A"
        )
        kind = run.get("kind", "canary")  # forced rounds before --kind named none
        key = (
            kind,
            run.get("strategy", "ddp" if kind == "canary" else "script"),
            change,
            run.get("script_steps", run.get("steps", 30 if kind == "script" else 100)),
            run.get("note", ""),
        )
        rounds = [forced(r) for r in run["rounds"] if "se_1" in r] if "layout" in run else run["rounds"]
        out.setdefault(key, []).extend(dict(r, run=number, pairing=pairing_of(run)) for r in rounds if r.get("paired"))
    return out


def pairing_of(run: dict) -> str:
    """The pairing a run's rounds were measured in: a forced run's ``pairing``, a whole gate's ``--pairing``, else the
    duet (the gate's default)."""
    args = run.get("gate_args", [])
    named = args[args.index("--pairing") + 1] if "--pairing" in args[:-1] else run.get("pairing", "duet")
    return named if named in ("swap", "alternate") else "duet"


RUN_ROUNDS = 2  # a run counts from two rounds: one round has no residual of its own


def by_run(rounds: list[dict], metric: str) -> tuple[list[float], list[tuple[float, float]]]:
    """The levels of the runs of ``RUN_ROUNDS`` rounds or more and every round's residual from its own run's mean,
    with the round's SE: what ``--by-run`` draws a replayed gate from. A run's mean holds its rounds' noise besides
    its level, so each level is its mean drawn toward the runs' grand mean by the share of its spread that noise
    explains (one-way random effects: the between-run variance is what the means' spread leaves above the rounds'
    own); where the means differ no more than their rounds allow, every level is the grand mean and the replay reads
    as independent draws do."""
    runs: dict[int, list[tuple[float, float]]] = {}
    for r in rounds:
        runs.setdefault(r["run"], []).append(value(r, metric))
    long = [found for found in runs.values() if len(found) >= RUN_ROUNDS]
    if not long:
        return [], []
    means = [statistics.fmean(log for log, _ in found) for found in long]
    residuals = [(log - mean, se) for mean, found in zip(means, long) for log, se in found]
    sizes = [len(found) for found in long]
    total = sum(sizes)
    grand = sum(mean * n for mean, n in zip(means, sizes)) / total
    if len(long) < 2:
        return [grand], residuals
    within = sum(res**2 for res, _ in residuals) / (total - len(long))
    spread = sum(n * (mean - grand) ** 2 for mean, n in zip(means, sizes)) / (len(long) - 1)
    size = (total - sum(n**2 for n in sizes) / total) / (len(long) - 1)
    between = max(0.0, (spread - within) / size)
    if not between:
        return [grand], residuals
    levels = [grand + (mean - grand) * math.sqrt(between / (between + within / n)) for mean, n in zip(means, sizes)]
    return levels, residuals


def forced(r: dict) -> dict:
    """A round of experiments/duet_bias.py (experiments/data/detection-data-duet-bias.jsonl: forced A/A rounds, those that
    recorded their SEs) as a whole gate's round reads."""
    se = math.hypot(r["se_w"], r["se_1"])
    return {
        "paired": True,
        "d_w": r["d_w"],
        "d_1": r["d_1"],
        "eff_log": r["d_1"] - r["d_w"],
        "se": se,
        "se_w": r["se_w"],
        "round": r["round"],
    }


def value(r: dict, metric: str) -> tuple[float, float]:
    """A round's log ratio (head against base, lower is worse) and its SE: the efficiency, or the step speed at W
    (``-d_w``; its own SE where the run recorded it, else the efficiency's, which is larger)."""
    if metric == "step_w":
        return -r["d_w"], r.get("se_w", r["se"])
    return r["eff_log"], r["se"]


def by_parity(rounds: list[dict]) -> dict[int, list[dict]] | None:
    """The rounds by their number's parity, as the gate alternates the side that turns first (odd rounds the
    head, even rounds the base; gate/rounds.py); None where a parity has no round."""
    split = {p: [r for r in rounds if r["round"] % 2 == p] for p in (0, 1)}
    return split if all(split.values()) else None


def gate(
    rounds: list[dict],
    shift: float,
    floor: tuple[float, str],
    design: sequential.Design,
    rng,
    metric: str = "eff",
    split: dict[int, list[dict]] | None = None,
    runs: tuple[list[float], list[tuple[float, float]]] | None = None,
) -> tuple:
    """One replayed gate: (status, rounds used). ``split`` (``by_parity``): round n is drawn from the recorded
    rounds of n's parity, so a replayed gate alternates the first side as a real one does; ``runs`` (``by_run``):
    the gate's level is one run's, its rounds that level plus residuals drawn from every run."""
    logs: list[float] = []
    ses: list[float] = []
    level = rng.choice(runs[0]) if runs else 0.0
    for n in range(1, design.max_launches + 1):
        if runs:
            residual, se = rng.choice(runs[1])
            log = level + residual
        else:
            log, se = value(rng.choice(split[n % 2] if split else rounds), metric)
        logs.append(log + shift)
        ses.append(se)
        sigma, _ = duet_floors.sigma_of(logs, ses, floor)
        found = sequential.decide([math.exp(x) for x in logs], 1.0, sigma, math.inf, design)  # type: ignore[arg-type]
        if found.status != sequential.UNDECIDED:
            return found.status, n
    return sequential.UNDECIDED, design.max_launches


def replay(
    rounds: list[dict],
    shift: float,
    floor: tuple[float, str],
    design,
    gates: int,
    seed: int,
    metric: str = "eff",
    parity: bool = False,
    runs: tuple[list[float], list[tuple[float, float]]] | None = None,
) -> dict:
    """``runs``: ``by_run``'s levels and residuals, where each replayed gate keeps one run's level."""
    rng = random.Random(seed)
    split = by_parity(rounds) if parity else None
    found = [gate(rounds, shift, floor, design, rng, metric, split, runs) for _ in range(gates)]
    share = {s: sum(1 for f, _ in found if f == s) / gates for s in (sequential.REGRESSED, sequential.OK)}
    return {
        "regressed": share[sequential.REGRESSED],
        "ok": share[sequential.OK],
        "undecided": 1 - sum(share.values()),
        "rounds": statistics.fmean(n for _, n in found),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=ROOT / "experiments" / "data" / "detection-data-duet.jsonl")
    p.add_argument("--tolerance", type=float, default=0.05, help="the drop the gate is built to catch")
    p.add_argument("--drop", type=float, default=0.05, help="the drop shifted into A/A rounds")
    p.add_argument("--budget", type=int, default=8)
    p.add_argument("--gates", type=int, default=10000)
    p.add_argument(
        "--floor", type=float, help="the sigma floor (default: the judge's for the kind and the rounds' pairing)"
    )
    p.add_argument(
        "--metric",
        choices=("eff", "step_w"),
        default="eff",
        help="the efficiency's test, or --scaling-step-time-tolerance's on the step time at W (--tolerance is then "
        "the step time's: a step that much slower)",
    )
    p.add_argument("--only", default="", help="only the sets whose name holds this text")
    draw = p.add_mutually_exclusive_group()
    draw.add_argument(
        "--parity",
        action="store_true",
        help="draw a replayed gate's round n from the recorded rounds of n's parity (the gate alternates the side "
        "that turns first by round, and a set's odd and even rounds can read apart; a set with rounds of one parity "
        "only is drawn from all of them); default: from all of them",
    )
    draw.add_argument(
        "--by-run",
        action="store_true",
        help="keep a recorded run's level in each replayed gate: one run's mean, less the share its rounds' own "
        "noise explains, plus residuals drawn from every run's rounds (each line of the data is a run); default: "
        "rounds drawn independently",
    )
    a = p.parse_args()
    step_w = a.metric == "step_w"
    design = sequential.Design(
        detect=duet_floors.speed_drop(a.tolerance) if step_w else a.tolerance,
        alpha=policy.ALPHA,
        beta=policy.BETA,
        max_launches=a.budget,
        min_launches_regressed=policy.MIN_ROUNDS,
        min_launches_ok=policy.MIN_ROUNDS,
        sigma_floor=0.0,
    )
    what = "step time at W" if step_w else "efficiency"
    drawn = ", round n drawn from the rounds of n's parity" if a.parity else ""
    drawn += ", each gate at one recorded run's level" if a.by_run else ""
    print(f"{what}: tolerance {a.tolerance:.0%}, budget {a.budget} rounds, {a.gates} gates per line{drawn}")
    print("| set | rounds | round spread | floor | false alarms | A/A ok | caught | 5% missed as ok | mean rounds |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for (kind, strategy, change, steps, note), rounds in sets(a.data).items():
        if len(rounds) < 4:
            continue
        floor = duet_floors.measured_floor("script" if kind == "script" else "workload", step_w, rounds[0]["pairing"])
        if a.floor is not None:
            floor = (a.floor, "--floor")
        spread = statistics.stdev(value(r, a.metric)[0] for r in rounds)
        name = f"{strategy} {change}, {steps} steps" + (f" ({note})" if note else "")
        if a.only not in name:
            continue
        runs = by_run(rounds, a.metric) if a.by_run else None
        if runs is not None and not runs[0]:
            print(f"| {name} | {len(rounds)} | {spread:.1%} | – | no run of {RUN_ROUNDS} rounds or more to keep |")
            continue
        if change == "A/A":
            clean = replay(rounds, 0.0, floor, design, a.gates, 1, a.metric, a.parity, runs)
            shift = -math.log(1 + a.drop) if step_w else math.log(1 - a.drop)  # a step `drop` slower at W
            drop = replay(rounds, shift, floor, design, a.gates, 2, a.metric, a.parity, runs)
            print(
                f"| {name} | {len(rounds)} | {spread:.1%} | {floor[0]:.1%} | {clean['regressed']:.1%} | "
                f"{clean['ok']:.1%} | {drop['regressed']:.1%} | {drop['ok']:.1%} | "
                f"{clean['rounds']:.1f} / {drop['rounds']:.1f} |"
            )
        else:
            slowed = replay(rounds, 0.0, floor, design, a.gates, 3, a.metric, a.parity, runs)
            mean = statistics.fmean(value(r, a.metric)[0] for r in rounds)
            print(
                f"| {name} (measured {math.exp(mean) - 1:+.1%}) | {len(rounds)} | {spread:.1%} | {floor[0]:.1%} | "
                f"– | – | {slowed['regressed']:.1%} | {slowed['ok']:.1%} | {slowed['rounds']:.1f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
