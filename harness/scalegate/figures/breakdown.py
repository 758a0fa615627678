"""Where a step's time went, per rank: compute, and the communication the compute did not hide (launching side).

The same-launch pairs (``harness/scalegate/measure/local_steps.py``) give both halves on every rank without a profiler: each
distributed step is followed, all ranks at once, by a *local* step of an unwrapped copy on the rank's share of
the batch, the same compute with no communication. Per rank and pair, compute = the local step, exposed
communication = distributed step - local step (never below 0): the time the rank's step lasted beyond its own
work, waiting on collectives (or on a slower rank). Communication that overlaps compute is hidden by definition
and not counted; ``--scaling-profile`` traces show it. The case's ``comm exposed`` share is the median over
pairs of the slowest rank's distributed step less the ranks' mean local step, over the distributed step: one
minus the local efficiency the gate already judges, so it is gated there, as stable as that is (docs/gate.md).
"""

from __future__ import annotations

from typing import Any

from scalegate.contract import metrics
from scalegate.contract.results import CaseResult


def per_rank(result: CaseResult) -> list[dict[str, float]]:
    """Median step, compute and exposed communication (seconds) of every rank that measured pairs."""
    out = []
    for r in result.ranks:
        pairs = list(zip(r.pair_step_times_s, r.local_step_times_s))
        if not pairs:
            continue
        step = metrics.median([d for d, _ in pairs])
        compute = metrics.median([loc for _, loc in pairs])
        exposed = metrics.median([max(0.0, d - loc) for d, loc in pairs])
        out.append(
            {
                "rank": r.rank,
                "step_s": step,
                "compute_s": compute,
                "exposed_comm_s": exposed,
                "exposed_share": exposed / step if step > 0 else 0.0,
            }
        )
    return out


def summary(result: CaseResult) -> dict[str, Any]:
    """The case's breakdown: per rank, and the exposed share of the whole step (slowest rank vs ranks' mean)."""
    pairs = list(zip(result.pair_step_times_s, result.local_step_times_s))
    if not pairs:
        return _script(result)
    shares = [max(0.0, d - loc) / d for d, loc in pairs if d > 0]
    return {
        "exposed_share": metrics.median(shares),
        "exposed_share_mad": metrics.mad(shares),
        "per_rank": per_rank(result),
        "pairs": len(pairs),
    }


def _script(result: CaseResult) -> dict[str, Any]:
    """A training script has no local copy to pair with: its exposed communication is the time its ranks spent
    in the blocking collectives it called from Python (harness/scalegate/worker/script.py), per step, the ranks' mean over
    the step (slowest rank); DDP's and FSDP's own overlapped collectives are not in it."""
    series = [r.extra.get("collective_s") or [] for r in result.ranks]
    steps = result.step_times_s
    if not steps or not all(len(s) == len(steps) for s in series):
        return {}
    shares = [sum(s[i] for s in series) / len(series) / t for i, t in enumerate(steps) if t > 0]
    per_rank = []
    for r, s in zip(result.ranks, series):
        step, exposed = metrics.median(r.step_times_s), metrics.median(s)
        compute = max(0.0, step - exposed)
        share = exposed / step if step > 0 else 0.0
        per_rank.append(
            {"rank": r.rank, "step_s": step, "compute_s": compute, "exposed_comm_s": exposed, "exposed_share": share}
        )
    return {
        "exposed_share": metrics.median(shares),
        "exposed_share_mad": metrics.mad(shares),
        "per_rank": per_rank,
        "source": "blocking collectives the script called (no same-launch pairs for a script)",
    }
