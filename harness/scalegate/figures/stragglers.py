"""Which rank arrives last at its first collective, by how much, and whether it is the same rank every step.

Each rank reports, per measured step, the time from the step's start to its loss (``RankResult.forward_s``,
harness/scalegate/measure/clock.py): for data-parallel strategies the compute it does before its first collective, where the
others wait for it. A step's straggler is the rank with the longest forward; the case names one when the same
rank is last in most steps (``CONSISTENT``) and its median forward exceeds the others' median by more than
``MIN_EXCESS_REL`` and ``MIN_EXCESS_S``. Strategies that gather or exchange inside the forward (FSDP, ZeRO-3, TP,
pipelines) even the ranks' forward times out: for them the ranks say so and nothing is named.
"""

from __future__ import annotations

from typing import Any

from scalegate.contract import metrics
from scalegate.contract.results import CaseResult

CONSISTENT = 0.8  # the same rank last in at least this share of the measured steps
MIN_EXCESS_REL = 0.10
MIN_EXCESS_S = 0.001


def attribute(result: CaseResult) -> dict[str, Any] | None:
    """Per-rank median forward, the last rank of every step, and the straggler (``rank``) or None."""
    spec = result.spec
    ranks = [r for r in result.ranks if len(r.forward_s) == spec.run.steps]
    if spec.world_size < 2 or len(ranks) < 2:
        return None
    if any(r.forward_collectives for r in result.ranks):
        return {
            "rank": None,
            "message": "",
            "why": f"{spec.strategy} communicates inside its forward: forward times "
            "do not show which rank arrives last",
        }
    medians = {r.rank: metrics.median(r.forward_s) for r in ranks}
    last = [max(ranks, key=lambda r: r.forward_s[i]).rank for i in range(spec.run.steps)]
    slowest = max(medians, key=medians.get)
    others = metrics.median([v for k, v in medians.items() if k != slowest])
    excess, share = medians[slowest] - others, last.count(slowest) / spec.run.steps
    named = excess > max(MIN_EXCESS_S, MIN_EXCESS_REL * others) and share >= CONSISTENT
    message = (
        (
            f"straggler: rank {slowest} reaches its first collective {excess * 1e3:.1f} ms after the others "
            f"(median forward {medians[slowest] * 1e3:.1f} ms against {others * 1e3:.1f} ms; last in "
            f"{last.count(slowest)}/{spec.run.steps} steps) [{spec.case_id}]"
        )
        if named
        else ""
    )
    return {
        "rank": slowest if named else None,
        "excess_s": excess,
        "last_share": share,
        "message": message,
        "forward_median_s": {str(k): v for k, v in sorted(medians.items())},
        "last_per_step": last,
    }
