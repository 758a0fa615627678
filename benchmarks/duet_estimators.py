"""A duet round's estimate under other trims, over every step of recorded rounds (docs/duet.md; the figures: docs/evidence/duet.md).

    python -m benchmarks.duet_estimators experiments/data/detection-data-duet-raw.jsonl.gz --only sitting   # forced rounds
    python -m benchmarks.duet_estimators experiments/data/detection-data-duet-raw.jsonl.gz --only "(A/A)"   # whole A/A gates
    python -m benchmarks.duet_estimators RAW --trims 0.2,0.4 --rounds-out /tmp/rounds.jsonl --trim 0.4
    python -m benchmarks.duet_estimators RAW --only "(A/A)" --launches 3,3    # rounds of three launches a level
    python -m benchmarks.duet_estimators experiments/data/swap-raw.jsonl.gz --turns experiments/data/swap-aa.jsonl

``--turns DATA``: the rounds of a pairing in turns (the swap pairing's, or a duet's ``--turn-steps``), with the
data file whose runs they are (its ``turn_steps``, a run's rounds in the raw file's order): each run's spread between
rounds under the judge's estimate (every step's log ratio, trimmed) and under two estimates from whole turns (a turn's
mean or median against the other side's turn of the same place, the turns' log ratios averaged).

The input is ``experiments/duet_bias.py --raw`` (or duet_aa.py's): a line a round, every step time of both sides at W and at 1x1 with
the launches' lengths. For each trim of the units' log ratios (``judge.duet_pairs.paired``'s estimate, ``TRIM`` there)
the table gives, at W and at 1x1, how far a round's launches lie apart (the launch means' spread inside a round,
root mean square over the rounds), the launches' own noise (odd against even units), and the spread between
rounds of the pooled estimate, with the efficiency's (d_1 - d_W). ``--rounds-out`` writes the rounds estimated
with ``--trim`` in duet_bias.py's row format, for benchmarks/duet_replay.py. Nothing is timed here.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
from pathlib import Path

from scalegate import policy
from scalegate.judge import duet_pairs

ROOT = Path(__file__).resolve().parents[1]


def raw_row(case_id: str, n: int, head, base) -> dict:
    """Round ``n`` of a case as this reads it: every step of both sides' merged records (``CaseRecord``), at W and
    at 1x1, with each launch's length (experiments/duet_aa.py and duet_bias.py write them with ``--raw``)."""
    fields = ("step_times_s", "lengths", "reference_step_times_s", "reference_lengths")
    row = {"case": case_id, "round": n}
    return row | {f"{s}_{k}": list(getattr(x, k)) for s, x in (("head", head), ("base", base)) for k in fields}


def read(paths: list[Path]) -> list[dict]:
    rows = []
    for path in paths:
        opened = gzip.open(path, "rt") if path.suffix == ".gz" else path.open()
        with opened as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def launches(
    row: dict, reference: bool, keep: tuple[int, int] = (0, 0), count: tuple[int, int] = (0, 0)
) -> list[list[float]]:
    """One level's launches, each as its units' log ratios (``policy.UNIT`` pairs a unit, as the judge forms them);
    ``keep``: only the first that many of each launch's units (at W, at 1x1; 0: all), as a shorter launch;
    ``count``: only the round's first that many launches (at W, at 1x1; 0: all), as a round of fewer launches."""
    p = "reference_" if reference else ""
    lengths = (row[f"head_{p}lengths"], row[f"base_{p}lengths"])
    pairs = duet_pairs.zip_launches(row[f"head_{p}step_times_s"], row[f"base_{p}step_times_s"], lengths)
    out = [duet_pairs.unit_logs(launch) for launch in pairs]
    out = out[: count[1 if reference else 0] or None]
    first = keep[1 if reference else 0]
    return [u[:first] for u in out] if first else out


def rms(values: list[float]) -> float:
    """Root mean square; nan where there is nothing (one launch a round has no spread between launches)."""
    values = list(values)
    return math.sqrt(statistics.fmean(v * v for v in values)) if values else math.nan


def level_table(
    rows: list[dict], reference: bool, trim: float, keep: tuple[int, int], count: tuple[int, int] = (0, 0)
) -> tuple[float, float, list[float]]:
    """(launch means' spread inside a round, one launch's own SE, every round's pooled estimate)."""
    every = [launches(r, reference, keep, count) for r in rows]
    between = rms([statistics.stdev([duet_pairs.trimmed_mean(u, trim) for u in one]) for one in every if len(one) > 1])
    own = rms(
        [
            (duet_pairs.trimmed_mean(u[0::2], trim) - duet_pairs.trimmed_mean(u[1::2], trim)) / 2
            for one in every
            for u in one
        ]
    )
    pooled = [duet_pairs.trimmed_mean([x for u in one for x in u], trim) for one in every]
    return between, own, pooled


def turn_estimate(pairs: list[list[tuple[float, float]]], turn: int, middle) -> float:
    """A level's estimate from whole turns, launch by launch: ``middle`` (``statistics.fmean`` or ``median``) of each
    of the head's turns against the base's turn of the same place (adjacent to it in time), the log ratios averaged."""
    logs = []
    for launch in pairs:
        for k in range(0, len(launch), turn):
            head, base = zip(*launch[k : k + turn])
            logs.append(math.log(middle(head) / middle(base)))
    return statistics.fmean(logs)


def turns_table(raw: list[dict], data: Path) -> None:
    """A line a run of ``data`` (experiments/duet_bias.py's rows, their rounds in ``raw``'s order): the spread between
    rounds of the efficiency and of the step at W, as the gate estimated them (the run's recorded rounds) and under
    the turn estimates."""
    runs = [json.loads(line) for line in data.read_text().splitlines() if line.strip()]
    print("| run | turn | the gate's: efficiency, at W | turn means | turn medians |")
    print("|---|--:|---|---|---|")
    at = 0
    for run in runs:
        rows, at = raw[at : at + len(run["rounds"])], at + len(run["rounds"])
        turn = run.get("turn_steps", 1)
        gate = [(r["d_1"] - r["d_w"], r["d_w"]) for r in run["rounds"]]
        said = [f"{statistics.stdev(e for e, _ in gate):.2%}, {statistics.stdev(w for _, w in gate):.2%}"]
        for middle in (statistics.fmean, statistics.median):
            w, one = [], []
            for r in rows:
                for p, out in (("", w), ("reference_", one)):
                    lengths = (r[f"head_{p}lengths"], r[f"base_{p}lengths"])
                    pairs = duet_pairs.zip_launches(r[f"head_{p}step_times_s"], r[f"base_{p}step_times_s"], lengths)
                    out.append(turn_estimate(pairs, turn, middle))
            eff = [a - b for a, b in zip(one, w)]
            said.append(f"{statistics.stdev(eff):.2%}, {statistics.stdev(w):.2%}")
        print(f"| {run.get('note', '')} | {turn} | " + " | ".join(said) + " |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("raw", type=Path, nargs="+", help="duet_bias.py --raw files (JSON lines, .gz too)")
    p.add_argument("--case", default="ddp", help="only the rounds of cases whose id starts with this")
    p.add_argument("--only", default="", help="only the rounds whose note holds this text (e.g. 'A/A', 'sitting')")
    p.add_argument("--trims", default="0.1,0.2,0.3,0.4,0.5")
    p.add_argument("--rounds-out", type=Path, help="write the rounds estimated with --trim here (duet_bias rows)")
    p.add_argument("--trim", type=float, default=policy.TRIM)
    p.add_argument("--note", default="", help="the note the written rounds carry (duet_replay.py --only)")
    p.add_argument(
        "--keep-units",
        default="0,0",
        help="W,1x1: only the first that many units of each launch (a shorter launch; 0: all)",
    )
    p.add_argument(
        "--launches",
        default="0,0",
        help="W,1x1: only a round's first that many launches (a round of fewer launches; 0: all)",
    )
    p.add_argument("--turns", type=Path, help="the runs' data file (duet_bias.py's): the turn estimates, by run")
    a = p.parse_args()
    if a.turns:
        turns_table(read(a.raw), a.turns)
        return 0
    keep = tuple(int(x) for x in a.keep_units.split(","))
    count = tuple(int(x) for x in a.launches.split(","))
    rows = [r for r in read(a.raw) if r["case"].startswith(a.case) and a.only in r.get("note", "")]
    print(f"{len(rows)} rounds")
    print(
        "| trim | W: launches apart | W: a launch's own | W: rounds | 1x1: apart | 1x1: own | 1x1: rounds | efficiency |"
    )
    print("|--:|--:|--:|--:|--:|--:|--:|--:|")
    for trim in (float(t) for t in a.trims.split(",")):
        w_apart, w_own, d_w = level_table(rows, False, trim, keep, count)
        r_apart, r_own, d_1 = level_table(rows, True, trim, keep, count)
        eff = [one - w for one, w in zip(d_1, d_w)]
        print(
            f"| {trim:.1f} | {w_apart:.2%} | {w_own:.2%} | {statistics.stdev(d_w):.2%} | {r_apart:.2%} | "
            f"{r_own:.2%} | {statistics.stdev(d_1):.2%} | {statistics.stdev(eff):.2%} (mean {statistics.fmean(eff):+.2%}) |"
        )
    if a.rounds_out:
        out = []
        for r in rows:
            w = [x for u in launches(r, False, keep, count) for x in u]
            one = [x for u in launches(r, True, keep, count) for x in u]
            out.append(
                {
                    "case": r["case"],
                    "round": r["round"],
                    "d_w": duet_pairs.trimmed_mean(w, a.trim),
                    "d_1": duet_pairs.trimmed_mean(one, a.trim),
                    "se_w": duet_pairs.block_se(w, trim=a.trim),
                    "se_1": duet_pairs.block_se(one, trim=a.trim),
                }
            )
        steps = policy.UNIT * len(launches(rows[0], False, keep, count)[0])
        record = {
            "kind": "script",
            "strategy": "ddp",
            "layout": "gate",
            "steps": steps,
            "note": a.note or f"trim {a.trim}",
        }
        with a.rounds_out.open("a") as f:
            f.write(json.dumps({**record, "rounds": out}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
