"""Correctness that fits a training script: its loss, read from rank 0's output (``loss_pattern``).

Gradients cannot be checked from outside a script, and the case says so (``agreement: n/a (script)``). What can be
checked: the loss must be finite and fall (the median of its last quarter below the median of its first), and
under strong scaling, where the script trains the same global batch on every topology, its curve must track the
1x1 run's within the marker's ``loss_tolerance`` at the steps both printed (torchtitan's converging.md compares
each run against a 1x1 or plain DDP run the same way).

The measurement itself is checked too (``measurement``), on every launch and its 1x1 reference: a script's steps are
counted from outside, so a count that went wrong must fail loudly, never pass as a number. Two peaks of step times
(a quarter of them under a tenth of the rest: a second optimizer-step call per training step counted as a step of
its own: a step far shorter than the script's pace), more optimizer steps than the script's own log numbers. A few
long steps (an evaluation, a checkpoint inside the window) are no second peak: the fast ones must be a quarter. And
ranks that trained alone: a script with no process group of the job's size, or ranks that sent (almost) nothing to
each other (Accelerate under torchrun on a CPU-only machine without ``cpu=True`` runs every process as
``DistributedType.NO``, each on all the data) measure W single processes side by side, an efficiency with no
communication in it.
"""

from __future__ import annotations

import math
import re
import statistics

from scalegate.contract.results import CaseResult

AGREEMENT_NA = "agreement: n/a (script): gradients cannot be checked from outside a training script"


def curve(result: CaseResult) -> list[tuple[float, float]]:
    """Rank 0's (step, loss) pairs, as the bootstrap read them."""
    return [(float(s), float(v)) for s, v in result.ranks[0].extra.get("loss_curve", [])] if result.ranks else []


MARK_BY_HAND = "mark each training step with scalegate.step() in the script (docs/your-script.md: Step counting)"
JOIN_THE_GROUP = (
    "let the script join the job's process group: torch.distributed.init_process_group(), or its stack's way "
    "(on a CPU-only machine, Accelerate: Accelerator(cpu=True) or `accelerate launch --cpu`; the HF Trainer: "
    "TrainingArguments(use_cpu=True); docs/your-script.md: Recipes)"
)


def measurement(result: CaseResult) -> list[str]:
    """What makes the launch's step times not a measurement of the script's training steps (any rank's)."""
    where = f"[{result.spec.case_id}]"
    found: list[str] = []
    for rank in result.ranks:
        if "steps_marked_by" not in rank.extra:  # not a script's rank
            continue
        times = sorted(rank.step_times_s)
        why = _two_peaks(times)
        if why:
            found.append(
                f"rank {rank.rank}'s step times {why}: {_how_counted(rank.extra)} {where} HINT: {MARK_BY_HAND}"
            )
            break
    alone = _alone(result)
    if alone:
        found.append(f"{alone} {where} HINT: {JOIN_THE_GROUP}")
    logged = _logged_steps(result)
    steps = result.ranks[0].extra.get("optimizer_steps") if result.ranks else None
    if logged is not None and steps and steps > 1.5 * logged:
        found.append(
            f"{steps} optimizer steps were counted where the script's own log numbers {logged:g}: "
            f"{_how_counted(result.ranks[0].extra)} {where} HINT: {MARK_BY_HAND}"
        )
    return found


# Data parallelism exchanges gradients every step: ranks that trained alone measured 0-9 bytes a step here (after the
# idle traffic's correction), DDP of a 65-parameter Linear on 2 ranks 3.2 kB (gloo's messages with their headers)
ALONE_BYTES = 128


def _alone(result: CaseResult) -> str | None:
    """Why the ranks of a multi-rank launch trained alone, if they did: a rank with no process group of the job's
    size in its window, or, on CPU where the job's own network namespace counts its traffic, (almost) no bytes
    sent a step. Accelerate under torchrun on a CPU-only machine without cpu=True creates the group and still runs
    every process as DistributedType.NO (no DDP, all the data on each): only the bytes show it."""
    ranks = [r for r in result.ranks if r.world_size > 1]
    for rank in ranks:
        size = rank.extra.get("process_group_size")
        if size is not None and size != rank.world_size:
            had = "no process group" if size == 1 else f"a process group of {size}"
            return (
                f"rank {rank.rank} of {rank.world_size} trained alone: its script had {had} when the measured window "
                f"opened, so the ranks ran as separate processes and their step times measure no scaling"
            )
    wire = (ranks[0].wire or {}) if ranks else {}
    sent = wire.get("bytes_per_step")
    if ranks and ranks[0].device == "cpu" and wire.get("source", "unavailable") != "unavailable" and sent is not None:
        if sent < ALONE_BYTES:
            return (
                f"the {ranks[0].world_size} ranks trained alone: they sent {sent} bytes a step between them "
                f"({wire['source']}), where data parallelism exchanges every step's gradients, so their step times "
                "measure no scaling"
            )
    return None


def two_peaks(step_times: list[float]) -> str | None:
    """Why a rank's step times are two kinds of step (see ``measurement``), None for one peak: the zoo's tests
    assert it of every stack's script (tests/test_zoo.py)."""
    return _two_peaks(sorted(step_times))


def _two_peaks(times: list[float]) -> str | None:
    """A quarter of the steps or more under a tenth of the upper quartile: two kinds of 'step' were counted."""
    if len(times) < 4:
        return None
    upper = times[(3 * len(times)) // 4]
    fast = [t for t in times if t < upper / 10]
    if len(fast) < len(times) / 4:
        return None
    rest = times[len(fast) :]
    return (
        f"have two peaks: {len(fast)} of {len(times)} are under a tenth of the others "
        f"({statistics.median(fast) * 1e3:.3g} ms vs {statistics.median(rest) * 1e3:.3g} ms)"
    )


def _how_counted(extra: dict) -> str:
    if extra.get("steps_marked_by") == "scalegate.step()":
        return "each scalegate.step() call counts as one training step: is it called more than once per step?"
    return (
        f"the bootstrap counted {extra.get('optimizer_steps')} training steps of {extra.get('counted_optimizer')} "
        f"({extra.get('optimizer_step_calls')} step calls, {extra.get('backward_calls')} backward passes): this "
        "stack's training steps are not one optimizer step each"
    )


def _logged_steps(result: CaseResult) -> float | None:
    """How many steps the script's own loss lines number (their last step + 1), where the pattern reads a step."""
    script = result.spec.script
    if script is None or not script.loss_pattern or re.compile(script.loss_pattern).groups != 2:
        return None  # one group: the points are numbered by the bootstrap, not by the script
    points = curve(result)
    return max(s for s, _ in points) + 1 if len(points) >= 2 else None


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
        # a loss that fell to the floor of the script's printed precision within the first quarter (the example's
        # 0.0000 after ~60 steps of 600) has nothing left to fall: its first reading is above both medians
        at_floor = last == first == min(v for _, v in points) and points[0][1] > last
        if not last < first and not at_floor:
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
