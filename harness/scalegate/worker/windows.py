"""The windows after the measured steps, in their order: the same-launch local steps, the profiler, the checkpoint.
Each runs once every figure of the measured window is taken, so none of them changes a measurement."""

from __future__ import annotations

from typing import Any, Callable

from scalegate.contract.spec import CaseSpec
from scalegate.measure import checkpoint, local_steps, profiling
from scalegate.strategies.base import RankContext
from scalegate.worker import device
from scalegate.worker.reference import make_optimizer_factory

# (step index, inject faults) -> (the step's times, its loss): the loop's own measured step
StepFn = Callable[[int, bool], tuple[Any, float]]


def profile_window(
    spec: CaseSpec, ctx: RankContext, strategy, workload, first_step: int, beat: Callable[[int, str], None]
) -> dict[str, Any]:
    """``--scaling-profile``: more steps under the torch profiler, run after every measured window has
    closed (times, memory, bytes), so it costs the measured steps nothing; nothing at all when off."""
    if not spec.windows.profile_steps:
        return {}
    from torch.profiler import record_function

    def step(i: int) -> None:  # the measured step's work, labelled; faults are not injected here
        beat(first_step + i, "profile")
        with record_function("batch"):
            inputs, targets = workload.global_batch(first_step + i, spec.global_batch_size)
            local_x, local_y = (t.to(ctx.device) for t in strategy.shard(inputs, targets))
        with record_function("forward_backward"), device.autocast(spec, ctx.device):
            strategy.forward_backward(local_x, local_y, workload.loss)
        with record_function("optimizer_step"):
            strategy.optimizer_step()
        device.sync(ctx.device)

    path = profiling.run_window(spec.windows.profile_steps, spec.windows.profile_dir, ctx.rank, ctx.device, step)
    return {"profile_trace": str(path)}


def checkpoint_window(
    spec: CaseSpec,
    ctx: RankContext,
    strategy,
    workload,
    full_state: dict[str, int],
    batch: int,
    beat: Callable[[int, str], None],
    step: StepFn,
) -> dict[str, Any]:
    """``--scaling-checkpoint`` (harness/scalegate/measure/checkpoint.py): save, step, load, the same step again; after every
    other window, so neither its files nor its extra steps reach a measured figure. Steps without injected faults."""
    if not spec.windows.checkpoint:
        return {}
    beat(batch, "checkpoint")
    return checkpoint.run_window(
        spec,
        ctx.rank,
        strategy,
        lambda i: step(i, False)[1],
        batch,
        lambda: device.sync(ctx.device),
    )


def local_window(
    spec: CaseSpec,
    ctx: RankContext,
    strategy,
    workload,
    full_state: dict[str, int],
    first_step: int,
    beat: Callable[[int, str], None],
    step: StepFn,
) -> dict[str, Any]:
    """The same-launch reference (harness/scalegate/measure/local_steps.py): after every measured window has closed."""
    if not spec.windows.local_steps:
        return {}
    why = local_steps.unavailable(ctx, full_state)
    if why:
        return {"local_unavailable": why}
    local = local_steps.LocalStep(
        workload, spec, ctx, make_optimizer_factory(spec), lambda: device.autocast(spec, ctx.device)
    )
    with local_steps.released(local):
        local(first_step, lambda: device.sync(ctx.device))  # the copy's first step pays its lazy set-up: untimed
        times = local_steps.run_window(
            spec.windows.local_steps,
            local,
            lambda s: step(s, True)[0],
            first_step + 1,
            lambda: device.sync(ctx.device),
            beat,
        )
    return times


def windows_after(
    spec: CaseSpec, ctx: RankContext, setup: Any, first: int, beat: Callable[[int, str], None], step: StepFn
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The windows after the measured one, in this order (each leaves the ones before it untouched): the
    same-launch local steps, the profiler, the checkpoint. Returns (extra results, per-step series)."""
    strategy, workload, full_state = setup.strategy, setup.workload, setup.full_state
    extra = local_window(spec, ctx, strategy, workload, full_state, first, beat, step)
    series = {k: extra.pop(k) for k in ("pair_step_times_s", "local_step_times_s") if k in extra}
    extra.update(profile_window(spec, ctx, strategy, workload, first + 1 + spec.windows.local_steps, beat))
    extra.update(
        checkpoint_window(spec, ctx, strategy, workload, full_state, first + 1 + spec.windows.local_steps, beat, step)
    )
    extra.update(strategy.extra_results())
    return extra, series
