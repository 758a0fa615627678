"""Correctness checks on the launching side: gradient agreement, parameter agreement, convergence.

Each check returns ``None`` when it passes, or a message naming the case, rank, parameter, the
measured error and the bound. A case that fails one gets no performance verdict.
"""

from __future__ import annotations

import math
import statistics

from scalegate.checks import tolerances
from scalegate.contract.results import CaseResult


def agreement(result: CaseResult) -> str | None:
    tol = tolerances.for_spec(result.spec)
    problems = []
    for kind, bound in (("grads", tol.grad_rel), ("params", tol.param_rel)):
        worst_rank, worst = None, None
        for rank in result.ranks:
            report = (rank.grad_check or {}).get(kind)
            if report is None:
                continue
            if report["missing"]:
                return (
                    f"{kind} agreement failed [{result.spec.case_id}] rank {rank.rank}: the strategy returned "
                    f"no full tensor for {', '.join(report['missing'][:5])}"
                )
            if report["worst"] is None:
                continue
            err = report["errors"][report["worst"]]
            if worst is None or err["rel"] > worst[1]["rel"]:
                worst_rank, worst = rank.rank, (report["worst"], err)
        if worst is not None and not worst[1]["rel"] <= bound:  # "not <=" also catches nan
            name, err = worst
            what = "gradient" if kind == "grads" else "parameter"
            when = "after one forward/backward" if kind == "grads" else "after the untimed optimizer steps"
            problems.append(
                f"{what} agreement failed [{result.spec.strategy} {result.spec.case_id}] rank {worst_rank}: "
                f"worst parameter {name!r} max abs error {err['abs']:.3g}, relative {err['rel']:.3g} "
                f"> tolerance {bound:.1g} ({result.spec.run.dtype}{', compiled' if result.spec.execution.compile else ''}) {when}, "
                f"against a single process on the same "
                f"global batch"
            )
    if problems and not_compared(result.spec):
        problems.append(not_compared(result.spec))
    return "\n".join(problems) or None


def not_compared(spec) -> str:
    """The parameters agreement left out, for the failure text: ``3 parameters with a true gradient of 0 not
    compared: a (64 of 192 elements), b, c (found in float64 ...)``; "" when there are none."""
    found = spec.zero_grad or {}
    params = found.get("params") or {}
    if not params:
        return f"zero-gradient parameters were compared: {found['why']}" if found.get("why") else ""
    names = [
        name if _left_out(entry) == entry["numel"] else f"{name} ({_left_out(entry)} of {entry['numel']} elements)"
        for name, entry in params.items()
    ]
    shown = ", ".join(names[:MAX_NAMED]) + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")
    why = f"; {found['why']}" if found.get("why") else ""
    return (
        f"{len(params)} parameter{'s' if len(params) != 1 else ''} with a true gradient of 0 not compared: {shown} "
        f"(found in {found.get('dtype') or '?'} on the pytest side before the launch{why})"
    )


MAX_NAMED = 8


def _left_out(entry: dict) -> int:
    return sum(stop - start for start, stop in entry["ranges"])


def compiled(result: CaseResult) -> str | None:
    """--scaling-compile: Dynamo compiled something on every rank (``compiled_frames``, harness/scalegate/worker/compiling.py).
    A compile time alone proves nothing: the first H100 run recorded 0.4 s while no frame compiled and the steps
    ran eager, measured as if compiled."""
    if not result.spec.execution.compile:
        return None
    for rank in result.ranks:
        frames = rank.extra.get("compiled_frames")
        if not (isinstance(frames, int) and frames > 0):
            return (
                f"torch.compile compiled nothing [{result.spec.case_id}] rank {rank.rank}: {frames!r} frames "
                f"compiled, so its steps ran eager and are no compiled measurement"
            )
    return None


def checkpoint(result: CaseResult) -> str | None:
    """--scaling-checkpoint's round trip (harness/scalegate/measure/checkpoint.py): the step resumed from the checkpoint must give
    the loss and parameters of the same step taken without stopping, on every rank."""
    tol = tolerances.for_dtype(result.spec.run.dtype)
    where = f"[{result.spec.strategy} {result.spec.case_id}]"
    for rank in result.ranks:
        found = rank.extra.get("checkpoint") or {}
        if not found or found.get("unavailable"):
            continue
        a, b = found["loss_uninterrupted"], found["loss_resumed"]
        loss_err = abs(b - a) / max(abs(a), 1e-12)
        params = found["params"]
        if params["missing"]:
            return (
                f"checkpoint round trip failed {where} rank {rank.rank}: after loading, the strategy returned no "
                f"full tensor for {', '.join(params['missing'][:5])}"
            )
        err = params["error"] or {"abs": 0.0, "rel": 0.0}
        if not err["rel"] <= tol.resume_param_rel or not loss_err <= tol.resume_loss_rel:  # "not <=" catches nan
            return (
                f"checkpoint round trip failed {where} rank {rank.rank}: the step resumed from the checkpoint "
                f"differs from the uninterrupted step: worst parameter {params['worst']!r} max abs error "
                f"{err['abs']:.3g}, relative {err['rel']:.3g} (tolerance {tol.resume_param_rel:.1g}); loss "
                f"{b:.8g} resumed vs {a:.8g} (relative {loss_err:.3g}, tolerance {tol.resume_loss_rel:.1g}, "
                f"{result.spec.run.dtype}; saved and loaded with {found.get('format', '?')})"
            )
    return None


MIN_CONVERGENCE_STEPS = 10


def convergence(result: CaseResult, fraction: float | None = tolerances.DEFAULT_CONVERGENCE_FRACTION) -> str | None:
    """The loss is finite and learned: below ``fraction`` of its start, or for ``None`` (a workload of your own,
    learning at its own pace: ``Preset.convergence_fraction``'s default) a fall beyond its own noise (``_fell``).
    Whether it tracks one process is ``loss_curve``'s to say."""
    losses = list(result.losses)
    first_ranks = [r for r in result.ranks if r.loss_weight > 0]
    start_curve = (
        [sum(r.loss_weight * r.warmup_losses[0] for r in first_ranks)]
        if all(r.warmup_losses for r in first_ranks)
        else []
    )
    curve = start_curve + losses
    bad = [i for i, v in enumerate(curve) if not math.isfinite(v)]
    if bad:
        return f"loss is not finite at step {bad[0]} [{result.spec.case_id}]: {curve[bad[0]]}"
    if len(curve) < MIN_CONVERGENCE_STEPS:  # too short to judge; the result records it as not checked
        return None
    if fraction is None:
        return _fell(curve, result.spec.case_id)
    start, end = curve[0], min(curve[-3:])
    if end > fraction * start:
        return (
            f"loss did not converge [{result.spec.case_id}]: {end:.4g} after {len(curve)} steps is above "
            f"{fraction:.0%} of its start {start:.4g} (the bar is Preset(convergence_fraction=...), {fraction:g} here; "
            "a workload of your own that learns at its own pace leaves it None, the default, and its loss must only "
            "fall: docs/your-model.md)"
        )
    return None


# A fall is told from noise by its least-squares trend: at least this many standard errors below flat. A flat loss
# with batch-to-batch noise passes 3% of runs of 21 steps (simulated); the quarters' medians, a script's test, 50%
TREND_SE = 2.0


def _fell(curve: list[float], case_id: str) -> str | None:
    """A workload of your own learns at its own pace: its loss must have fallen below the built-in workloads'
    70% of its start (a fast learner), or trend down over the run by more than its own noise (a slow one)."""
    fraction = tolerances.DEFAULT_CONVERGENCE_FRACTION
    if min(curve[-3:]) <= fraction * curve[0]:
        return None
    slope, se = _trend(curve)
    if slope < -TREND_SE * se:
        return None
    n, t = len(curve), (slope / se if se > 0 else 0.0)
    side = "flat" if t == 0 else f"{abs(t):.2g} standard errors {'below' if t < 0 else 'above'} flat"
    return (
        f"loss did not fall [{case_id}]: a trend of {slope * (n - 1):+.3g} over its {n} steps from {curve[0]:.4g} "
        f"(least squares): {side}, where a fall of {TREND_SE:g} standard errors is needed, and not below "
        f"{fraction:.0%} of its start "
        "(the bar of a workload of your own, Preset(convergence_fraction=None), the default; a number between 0 and 1 "
        "asks the loss to fall below that fraction of its start instead: docs/your-model.md)"
    )


def _trend(curve: list[float]) -> tuple[float, float]:
    """The least-squares slope of the loss per step, and its standard error (0 for a curve on a straight line)."""
    n = len(curve)
    mid, mean = (n - 1) / 2, statistics.fmean(curve)
    sxx = sum((x - mid) ** 2 for x in range(n))
    slope = sum((x - mid) * (y - mean) for x, y in enumerate(curve)) / sxx
    residual = sum((y - mean - slope * (x - mid)) ** 2 for x, y in enumerate(curve))
    return slope, math.sqrt(residual / (n - 2) / sxx)


def loss_curve(result: CaseResult) -> str | None:
    """The global loss of the untimed steps tracks the single process on the same global batches."""
    weighted = [r for r in result.ranks if r.loss_weight > 0]
    reference = next((r.grad_check or {} for r in result.ranks if (r.grad_check or {}).get("reference_losses")), {})
    ref = reference.get("reference_losses") or []
    if not weighted or not ref or not all(len(r.warmup_losses) >= len(ref) for r in weighted):
        return None
    bound = tolerances.for_dtype(result.spec.run.dtype).loss_rel
    for step, want in enumerate(ref):
        got = sum(r.loss_weight * r.warmup_losses[step] for r in weighted)
        err = abs(got - want) / max(abs(want), 1e-12)
        if not err <= bound:
            return (
                f"loss curve diverges from a single process [{result.spec.case_id}] at untimed step {step}: "
                f"{got:.6g} vs {want:.6g} (relative {err:.3g} > tolerance {bound:.1g}, {result.spec.run.dtype}) "
                f"on the same global batch"
            )
    return None


def final_loss(result: CaseResult, baseline_value: float | None, tolerance: float, where: str) -> str | None:
    """A final loss worse than the baseline's beyond tolerance: the run trains a different model."""
    if baseline_value is None or not result.losses:
        return None
    got = result.losses[-1]
    limit = baseline_value * (1 + tolerance)
    if not got <= limit:
        return f"final loss {got:.4g} is above baseline {baseline_value:.4g} (tolerance {tolerance:.0%}) [{where}]"
    return None
