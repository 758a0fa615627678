"""Correctness that fits a training script: its loss, read from rank 0's output (``loss_pattern``).

Gradients cannot be checked from outside a script, and the case says so (``agreement: n/a (script)``). What can be
checked: the loss must be finite and fall (the median of its last quarter below the median of its first), and
under strong scaling, where the script trains the same global batch on every topology, its curve must track the
1x1 run's within the marker's ``loss_tolerance`` at the steps both printed (torchtitan's converging.md compares
each run against a 1x1 or plain DDP run the same way).
"""

from __future__ import annotations

import math
import statistics

from scalegate.contract.results import CaseResult

AGREEMENT_NA = "agreement: n/a (script): gradients cannot be checked from outside a training script"


def curve(result: CaseResult) -> list[tuple[float, float]]:
    """Rank 0's (step, loss) pairs, as the bootstrap read them."""
    return [(float(s), float(v)) for s, v in result.ranks[0].extra.get("loss_curve", [])] if result.ranks else []


def problems(result: CaseResult, reference: CaseResult | None) -> tuple[list[str], list[str]]:
    """(problems, notes) of one launch: a problem fails the case, a note says what was not checked and why."""
    script = result.spec.script
    notes = [AGREEMENT_NA]
    if script is None or not script.loss_pattern:
        return [], [*notes, "loss checks not run: the marker declares no loss_pattern"]
    points = curve(result)
    if not points:
        return [], [
            *notes,
            f"loss checks not run: loss_pattern {script.loss_pattern!r} matched nothing in rank 0's output",
        ]
    where = f"[{result.spec.case_id}]"
    bad = [(s, v) for s, v in points if not math.isfinite(v)]
    if bad:
        return [f"the script's loss is {bad[0][1]} at step {bad[0][0]:g} {where}"], notes
    found = []
    if len(points) >= 4:
        quarter = max(1, len(points) // 4)
        first = statistics.median(v for _, v in points[:quarter])
        last = statistics.median(v for _, v in points[-quarter:])
        if not last < first:
            found.append(
                f"the script's loss did not fall: {first:.4g} over its first {quarter} reading(s), {last:.4g} over its "
                f"last {quarter} {where}"
            )
    else:
        notes.append(f"convergence not judged: {len(points)} loss reading(s), 4 or more needed")
    if result.spec.scaling == "strong" and reference is not None and reference.spec != result.spec:
        found += _tracks(points, curve(reference), script.loss_tolerance, result.spec.case_id, reference.spec.case_id)
    return found, notes


def _tracks(points: list, reference: list, tolerance: float, case_id: str, reference_id: str) -> list[str]:
    """Strong scaling: the same global batch, so the same curve up to reduction order, at the steps both printed."""
    theirs = dict(reference)
    common = [(s, v, theirs[s]) for s, v in points if s in theirs]
    if not common:
        return []
    step, mine, ref = max(common, key=lambda t: abs(t[1] - t[2]) / max(abs(t[2]), 1e-12))
    rel = abs(mine - ref) / max(abs(ref), 1e-12)
    if rel <= tolerance:
        return []
    return [
        f"the script's loss curve leaves the 1x1 run's: at step {step:g} {mine:.6g} vs {ref:.6g} ({reference_id}), "
        f"{rel:.1%} > loss_tolerance {tolerance:.0%} with the same global batch [{case_id}]"
    ]
