"""How the same-launch estimate was chosen: its spread between launches, per variant and estimator.

    .venv/bin/python -m experiments.local_design experiments/data/detection-data-local-design.jsonl

The data (docs/detection.md, fifth set) are launches of ddp-cnn-1x2 (and, in set2, fsdp and
deepspeed-zero2) with 20 or 40 same-launch pairs, clean and with every distributed step made slower,
taken with experimental switches that no longer exist: ``a1`` a barrier before each half of a pair
(shipped), ``a0`` none; ``b1`` pairs one by one (shipped), ``b5`` in blocks of five. Per pair it holds
each rank's distributed and local step. For each variant this prints, over launches, the median and the
spread (sample deviation and MAD-sigma of the log) of each estimator, and how far the slowdown moved it.
"""

from __future__ import annotations

import json
import math
import statistics as st
import sys
from collections import defaultdict


def trimmed(values: list[float], share: float = 0.2) -> float:
    values = sorted(values)
    cut = int(len(values) * share)
    return st.mean(values[cut : len(values) - cut])


def estimators(row: dict) -> dict[str, float]:
    dist = [max(pair) for pair in zip(*row["ranks_pair"])]  # the slowest rank's distributed step
    mean_local = [st.mean(pair) for pair in zip(*row["ranks_local"])]
    slowest_local = [max(pair) for pair in zip(*row["ranks_local"])]
    logs_mean = [math.log(loc / d) for loc, d in zip(mean_local, dist)]
    logs_slowest = [math.log(loc / d) for loc, d in zip(slowest_local, dist)]
    return {
        "slowest rank's local, median": st.median(logs_slowest),
        "ranks' mean local, median": st.median(logs_mean),
        "ranks' mean local, 20% trimmed mean (shipped)": trimmed(logs_mean),
        "ratio of medians": math.log(st.median(mean_local) / st.median(dist)),
    }


def main(path: str) -> None:
    rows = [json.loads(line) for line in open(path)]
    groups: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row["strategy"] == "single":
            continue
        key = (row["set"], row["strategy"], row["variant"], row["pairs"], row["slowdown"])
        for name, value in estimators(row).items():
            groups[key][name].append(value)
    print(
        "| set | case | variant | pairs | slowdown | estimator | launches | median | sd(ln) | MAD-sigma(ln) | shift |"
    )
    print("|---|---|---|--:|--:|---|--:|--:|--:|--:|--:|")
    for key in sorted(groups):
        clean = groups[(*key[:4], 0.0)]
        for name, logs in groups[key].items():
            center = st.median(logs)
            mad = 1.4826 * st.median([abs(x - center) for x in logs])
            shift = center - st.median(clean[name]) if key[4] else 0.0
            print(
                f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]:g} | {name} | {len(logs)} | "
                f"{math.exp(center):.3f} | {st.stdev(logs):.3f} | {mad:.3f} | {shift:+.3f} |"
            )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "experiments/data/detection-data-local-design.jsonl")
