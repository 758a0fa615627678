"""Several finished runs of the same cases as one: what a baseline is recorded from.

``record-baselines --rounds N`` and ``update-baselines RUN...`` both read runs here: one case per key, the median
launch, its noise the spread between launches, every run's local efficiencies kept (their spread is the sequential
gate's sigma). A run that failed correctness taints the whole set (``update.refuse_unsound``).
"""

from __future__ import annotations

from pathlib import Path

from scalegate.contract.errors import ScalegateError
from scalegate.figures import stats
from scalegate.record import runfiles, update


def cases(run: str) -> list[dict]:
    """A run directory's case results, or an error naming it."""
    found = runfiles.load_run(Path(run))
    if not found:
        raise ScalegateError(
            f"{run} holds no case results (*.json with case_id and status)",
            "pass a run directory written by `pytest scaling_tests`, e.g. results/latest",
        )
    return found


def merged_runs(runs: list[str]) -> list[dict]:
    """One case per key: with several runs, the median launch, its noise the spread between launches."""
    every = [case for run in runs for case in cases(run)]
    update.refuse_unsound(every)  # one bad launch taints the whole set
    if len(runs) == 1:
        return every
    by_key: dict[str, list[dict]] = {}
    for case in every:
        by_key.setdefault(case["key"], []).append(case)
    out = []
    for group in by_key.values():
        timed = [c for c in group if c.get("efficiency") is not None and c.get("result")]
        merged = dict(stats.merge_launches(timed) if len(timed) == len(group) else group[-1])
        local = [v for c in group for v in (c.get("launch_local_efficiencies") or ())]
        if local:  # every run's launches: their spread is the sequential gate's sigma
            merged["launch_local_efficiencies"] = local
        out.append(merged)
    return out
