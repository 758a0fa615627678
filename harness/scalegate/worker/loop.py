"""The worker's training loop: build, wrap, check against a single process, warm up, measure.

Untimed steps come first: the first does the gradient check, and a plain single-process copy of the
model follows the strategy through all of them so parameters can be compared after the optimizer
has moved them. Only then are steps timed, each between device syncs.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from scalegate import strategies, workloads
from scalegate.contract.results import RankResult
from scalegate.contract.spec import CaseSpec
from scalegate.measure import flops, gradcheck, turns
from scalegate.measure import state_bytes as model_state
from scalegate.measure.clock import ForwardClock
from scalegate.measure.memory import cuda_peaks
from scalegate.strategies.base import RankContext
from scalegate.worker import companion as companions
from scalegate.worker import compiling, device, faults, windows
from scalegate.worker.measured import MeasuredWindow
from scalegate.worker.reference import Reference, make_optimizer_factory, pieces_for


def rank_context(spec: CaseSpec) -> RankContext:
    """Rank, world and device come from the launcher's environment (torchrun or SLURM)."""
    env = os.environ
    rank, world = int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1))
    local_rank = int(env.get("LOCAL_RANK", 0))
    use_cuda = spec.device == "cuda" or (spec.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    return RankContext(
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        local_world_size=int(env.get("LOCAL_WORLD_SIZE", world)),
        node_rank=int(env.get("GROUP_RANK", 0)),
        device=device,
    )


def _step(
    spec: CaseSpec,
    ctx: RankContext,
    strategy,
    workload,
    step: int,
    full_state: dict[str, int],
    between: Callable[[torch.Tensor, torch.Tensor], tuple[float, bool]] | None = None,
    inject: bool = True,
    clock: ForwardClock | None = None,
) -> tuple[float, float]:
    """One distributed optimizer step between device syncs: (seconds, loss).

    ``between(inputs, targets)`` runs after forward/backward, before the optimizer step (the gradient
    check, state bytes); it returns (seconds to leave out of the step's time, skip this rank's update).
    ``inject=False`` leaves out the injected step faults: a parity companion is the clean baseline. ``clock``
    times the forward (harness/scalegate/measure/clock.py); the injected straggler sleeps there.
    """
    inputs, targets = workload.global_batch(step, spec.global_batch_size)
    local_x, local_y = (t.to(ctx.device) for t in strategy.shard(inputs, targets))
    loss_fn = workload.loss if clock is None else clock.wrap(workload.loss, inject)
    device.sync(ctx.device)
    t0 = time.perf_counter()
    if clock is not None:
        clock.start(t0)
    with device.autocast(spec, ctx.device):
        loss = strategy.forward_backward(local_x, local_y, loss_fn)
    skip = False
    if between is not None:
        paused, skip = between(inputs, targets)
        t0 += paused  # bookkeeping is not the step's time
    if skip:
        strategy.optimizer.zero_grad(set_to_none=True)  # injected fault: this rank misses an update
    else:
        strategy.optimizer_step()
    if ctx.world_size > 1 and inject:
        faults.inject_comm_fault(spec, full_state)
        if spec.faults.delay_ms:
            time.sleep(spec.faults.delay_ms / 1000)
        if spec.faults.slowdown:  # relative to this step's own time, so the fault is the same size on any machine
            device.sync(ctx.device)
            time.sleep(spec.faults.slowdown * (time.perf_counter() - t0))
    device.sync(ctx.device)
    return time.perf_counter() - t0, float(loss) if loss is not None else float("nan")


@dataclass
class _Setup:
    """What a rank builds before its first step."""

    workload: Any
    model: torch.nn.Module
    strategy: Any
    full_state: dict[str, int]  # analytic: what one DDP replica would hold
    reference: Reference | None  # handed to the steps, which drop it once the gradient check is done
    companion: Any  # parity's second strategy, or None
    compile_s: float | None


def _setup(spec: CaseSpec, ctx: RankContext, data_dir: str | None, beat: Callable[[int, str], None]) -> _Setup:
    beat(-1, "build")
    # a user's workload is imported here from the spec's reference and directories (fixtures/loader.py)
    workload = workloads.resolve(spec)(spec.preset, spec.run.seed, data_dir, dims=spec.dims)
    torch.manual_seed(spec.run.seed)  # identical initial weights on every rank and in the reference
    model = workload.build_model()
    strategy = strategies.get(spec.strategy)(ctx, spec, workload=workload)  # its FSDP units, pipeline cuts
    reference = (
        Reference(model, spec, ctx.device, workload.loss, *pieces_for(model, strategy, spec, workload.sync_batchnorm))
        if spec.grad_check
        else None
    )
    if workload.sync_batchnorm:  # after the reference's copy, which keeps plain BatchNorm over the whole batch
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    beat(-1, "setup")
    full_state = model_state.full_replica_bytes(model)  # analytic: what one DDP replica would hold
    if spec.execution.compile:  # in place, before the strategy wraps the blocks; the reference above stays eager
        compiling.compile_blocks(workload, model)
    strategy.setup(model, make_optimizer_factory(spec))
    compile_s = (
        compiling.compile_step(
            strategy,
            workload.global_batch(0, spec.global_batch_size),
            workload.loss,
            ctx.device,
            lambda: device.sync(ctx.device),
            device.autocast(spec, ctx.device),
        )
        if spec.execution.compile
        else None
    )
    # parity's second strategy, stepping beside this one (None otherwise); its model counts in this launch's
    # memory and bytes, which parity does not judge
    companion = companions.build(
        spec,
        ctx,
        workload,
        make_optimizer_factory(spec),
        lambda other, i, faulted: _step(spec, ctx, other, workload, i, full_state, inject=faulted),
    )
    return _Setup(
        workload=workload,
        model=model,
        strategy=strategy,
        full_state=full_state,
        reference=reference,
        companion=companion,
        compile_s=compile_s,
    )


class _Steps:
    """The rank's steps: untimed first (warm-up; the gradient check on the first, against a single-process
    reference that follows all of them), then the measured ones inside the window."""

    def __init__(self, spec: CaseSpec, ctx: RankContext, setup: _Setup) -> None:
        self.spec, self.ctx, self.setup = spec, ctx, setup
        # only the steps hold the reference, so that it is freed before the measured window opens
        self.reference, setup.reference = setup.reference, None
        self.unmeasured = max(spec.run.warmup, 1 if spec.grad_check else 0)
        self.step_flops = flops.StepFlops(enabled=ctx.rank == 0 and self.reference is not None)  # measure/flops.py
        self.clock = ForwardClock(ctx.rank, spec.faults.straggler_rank, spec.faults.straggler_ms)  # measure/clock.py
        self.times: list[float] = []
        self.losses: list[float] = []
        self.warmup_losses: list[float] = []
        self.check: dict[str, Any] = {}
        self.held: dict[str, int] = {}  # state bytes while the last step's gradients exist

    def run(self, window: MeasuredWindow, beat: Callable[[int, str], None]) -> None:
        for step in range(self.unmeasured + self.spec.run.steps):
            beat(step, "step")
            turns.ACTIVE.turn(step - 1)  # a duet's turn: the step runs alone, timed after the grant (docs/duet.md)
            faults.inject_stop_fault(self.spec, self.ctx, step)
            if step == self.unmeasured:
                self._end_reference()
                window.open()
            measured = step >= self.unmeasured
            companion = self.setup.companion
            with self._kernels():
                elapsed, value = (
                    companion.interleave(step, self._main(step), measured) if companion else self._main(step)()
                )
            self.clock.keep(measured)
            if measured:
                window.step()
                self.times.append(elapsed)
                self.losses.append(value)
            else:
                self.warmup_losses.append(value)

    def _kernels(self):
        """Deterministic kernels while the reference steps beside the strategy (CUDA; worker/device.py)."""
        return device.deterministic_kernels(self.ctx.device) if self.reference is not None else contextlib.nullcontext()

    def _end_reference(self) -> None:
        """After the untimed steps: compare the parameters the optimizer moved, then drop the reference."""
        if self.reference is not None:
            self.check["params"] = gradcheck.compare(
                self.setup.strategy.full_parameters(), self.reference.parameters(), self.spec.zero_grad
            )
            self.check["param_steps"] = self.unmeasured
            self.check["reference_losses"] = self.reference.losses
            self.reference = None

    def _main(self, step: int) -> Callable[[], tuple[float, float]]:
        setup = self.setup

        def main() -> tuple[float, float]:
            return _step(
                self.spec,
                self.ctx,
                setup.strategy,
                setup.workload,
                step,
                setup.full_state,
                between=lambda inputs, targets: self._between(inputs, targets, step),
                clock=self.clock,
            )

        return main

    def _between(self, inputs: torch.Tensor, targets: torch.Tensor, step: int) -> tuple[float, bool]:
        """After forward/backward, before the optimizer step: faults, the reference's step and the gradient check,
        and the state bytes of the last step; returns (seconds to leave out of the step, skip this rank's update)."""
        spec, ctx, strategy = self.spec, self.ctx, self.setup.strategy
        faults.inject_grad_fault(spec, ctx, strategy)
        if self.reference is not None:
            with self.step_flops.counting() if step == 0 else contextlib.nullcontext():  # the single process's step
                ref_grads = self.reference.step(
                    inputs.to(ctx.device), targets.to(ctx.device), device.autocast(spec, ctx.device)
                )
            if step == 0:
                self.check["grads"] = gradcheck.compare(strategy.full_gradients(), ref_grads, spec.zero_grad)
        paused = 0.0
        if step == self.unmeasured + spec.run.steps - 1:  # gradients exist only until the optimizer step
            t_state = time.perf_counter()
            self.held = strategy.state_bytes()
            paused = time.perf_counter() - t_state
        return paused, step == spec.faults.skip_step and ctx.rank == spec.faults.skip_step_rank


def train(
    spec: CaseSpec,
    ctx: RankContext,
    data_dir: str | None = None,
    beat: Callable[[int, str], None] = lambda step, phase: None,
) -> RankResult:
    """``beat(step, phase)`` records progress (a heartbeat), called only outside the timed region."""
    started = time.perf_counter()
    setup = _setup(spec, ctx, data_dir, beat)
    turns.ACTIVE.follow(setup.strategy.optimizer)  # the swap pairing: the setup's turn ends swapped out
    steps = _Steps(spec, ctx, setup)
    window = MeasuredWindow(spec, ctx)
    steps.run(window, beat)
    window.close()
    held = model_state.peak_state(steps.held, setup.strategy.state_bytes())
    first = steps.unmeasured + spec.run.steps

    def step(i: int, inject: bool) -> tuple[Any, float]:
        return _step(spec, ctx, setup.strategy, setup.workload, i, setup.full_state, inject=inject)

    extra, series = windows.windows_after(spec, ctx, setup, first, beat, step)
    if spec.execution.compile:  # proof that torch.compile compiled something, beside its time (tests/test_compile.py)
        extra["compiled_frames"] = compiling.compiled_frames()
    if turns.ACTIVE.summary():
        extra["duet"] = (
            turns.ACTIVE.summary()
        )  # paired or solo, and why (judge/duet_pairs.py pairs the two sides' steps)
    if ctx.device.type == "cuda":
        extra["gpu_state"] = (
            window.sampler.gpu_state()
        )  # clocks, temperature, power, throttle reasons (measure/gpu_state.py)
    beat(first, "teardown")
    if setup.companion is not None:
        series.update(setup.companion.result())
        setup.companion.teardown()
    setup.strategy.teardown()
    return _result(spec, ctx, setup, steps, window, held, extra, series, started)


def _result(
    spec: CaseSpec,
    ctx: RankContext,
    setup: _Setup,
    steps: _Steps,
    window: MeasuredWindow,
    held: dict[str, int],
    extra: dict[str, Any],
    series: dict[str, Any],
    started: float,
) -> RankResult:
    strategy, sampler = setup.strategy, window.sampler
    return RankResult(
        rank=ctx.rank,
        world_size=ctx.world_size,
        node_rank=ctx.node_rank,
        host=socket.gethostname(),
        device=str(ctx.device),
        step_times_s=steps.times,
        losses=steps.losses,
        warmup_losses=steps.warmup_losses,
        loss_weight=strategy.loss_weight,
        **window.memory(),
        cpu_user_s=window.cpu1.user - window.cpu0.user,
        cpu_system_s=window.cpu1.system - window.cpu0.system,
        wall_s=time.perf_counter() - started,
        grad_check=steps.check or None,
        memory_interval_s=sampler.interval_s,
        memory_timeline=sampler.timeline(),
        cuda_memory=cuda_peaks(ctx.device),
        state_bytes=held,
        full_state_bytes=setup.full_state,
        shard_group=strategy.shard_group_size(),
        wire=window.wire.result(spec.run.steps),
        ledger=window.ledger.result(),
        cpu_wait=window.cpu_wait.result(),
        extra=extra,
        **series,
        **_promises(strategy, ctx),
        **steps.step_flops.result(),
        tokens_per_sample=setup.workload.tokens_per_sample(),
        compile_s=setup.compile_s,
        forward_s=steps.clock.times,
    )


def _promises(strategy, ctx: RankContext) -> dict[str, Any]:
    """What the strategy promises, for the launching side's sharding and wire gates: reported by the ranks so
    that side never imports strategy code (docs/architecture.md: it never imports the rank side)."""
    factor = strategy.wire_factor
    if isinstance(factor, dict):  # by backend: NCCL on CUDA ranks, gloo elsewhere
        factor = factor.get("nccl" if ctx.device.type == "cuda" else "gloo")
    return {
        "shards": list(strategy.shards),
        "shard_granularity": strategy.shard_granularity,
        "wire_factor": factor,
        "forward_collectives": strategy.forward_collectives,
    }
