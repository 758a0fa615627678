"""The worker's training loop: build, wrap, check against a single process, warm up, measure.

Untimed steps come first: the first does the gradient check, and a plain single-process copy of the
model follows the strategy through all of them so parameters can be compared after the optimizer
has moved them. Only then are steps timed, each between device syncs.
"""

from __future__ import annotations

import contextlib
import copy
import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable

import psutil
import torch

from scalegate import strategies, workloads
from scalegate.contract.results import RankResult
from scalegate.contract.spec import CaseSpec
from scalegate.measure import checkpoint, flops, gradcheck, local_steps, profiling
from scalegate.measure import state_bytes as model_state
from scalegate.measure.clock import ForwardClock
from scalegate.measure.memory import MemorySampler, cuda_peaks
from scalegate.measure.wire import WireCounter
from scalegate.strategies.base import RankContext
from scalegate.worker import companion as companions
from scalegate.worker import compiling


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


def make_optimizer_factory(spec: CaseSpec):
    def make(params):
        return torch.optim.AdamW(params, lr=spec.lr)

    return make


class Reference:
    """The same model, unwrapped, stepping on the whole global batch in this one process."""

    def __init__(self, model: torch.nn.Module, spec: CaseSpec, device: torch.device, loss_fn) -> None:
        self.model = copy.deepcopy(model).to(device)
        self.optimizer = make_optimizer_factory(spec)(self.model.parameters())
        self.loss_fn = loss_fn
        self.losses: list[float] = []  # the single-process curve at the same global batches

    def step(
        self, inputs: torch.Tensor, targets: torch.Tensor, autocast=contextlib.nullcontext()
    ) -> dict[str, torch.Tensor]:
        self.optimizer.zero_grad(set_to_none=True)
        with autocast:  # the same mixed precision as the strategy's forward, or bf16 would differ by design
            loss = self.loss_fn(self.model(inputs), targets)
        loss.backward()
        self.losses.append(float(loss))
        grads = {n: p.grad.detach().clone() for n, p in self.model.named_parameters() if p.grad is not None}
        self.optimizer.step()
        return grads

    def parameters(self) -> dict[str, torch.Tensor]:
        return {n: p.detach() for n, p in self.model.named_parameters()}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _autocast(spec: CaseSpec, device: torch.device):
    if spec.dtype == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _inject_grad_fault(spec: CaseSpec, ctx: RankContext, strategy) -> None:
    if spec.faults.grad_scale != 1.0 and ctx.rank == spec.faults.grad_scale_rank:
        for param in strategy.model.parameters():
            if param.grad is not None:
                param.grad.mul_(spec.faults.grad_scale)


def _inject_stop_fault(spec: CaseSpec, ctx: RankContext, step: int) -> None:
    faults = spec.faults
    if ctx.rank == faults.crash_rank and step == faults.crash_step:
        raise RuntimeError(f"injected crash on rank {ctx.rank} at step {step} (--scaling-inject-fault)")
    if ctx.rank == faults.hang_rank and step == faults.hang_step:
        while True:  # injected hang: the other ranks block in this step's first collective
            time.sleep(3600)


def _inject_comm_fault(spec: CaseSpec, full_state: dict[str, int]) -> None:
    """Injected fault: extra gradient-sized all-reduces every step (a duplicated collective)."""
    import torch.distributed as dist

    if spec.faults.extra_allreduce and dist.is_initialized():
        buffer = torch.zeros(full_state["params"] // 4, device=_comm_device())
        for _ in range(spec.faults.extra_allreduce):
            dist.all_reduce(buffer)


def _inject_memory_fault(spec: CaseSpec) -> torch.Tensor | None:
    """Injected fault: memory held through the measured steps (written, so its pages are resident)."""
    mb = spec.faults.hold_memory_mb
    return torch.ones(mb << 18, device=_comm_device()) if mb else None


def _comm_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def _profile_window(
    spec: CaseSpec, ctx: RankContext, strategy, workload, first_step: int, beat: Callable[[int, str], None]
) -> dict[str, Any]:
    """``--scaling-profile``: more steps under the torch profiler, run after every measured window has
    closed (times, memory, bytes), so it costs the measured steps nothing; nothing at all when off."""
    if not spec.profile_steps:
        return {}
    from torch.profiler import record_function

    def step(i: int) -> None:  # the measured step's work, labelled; faults are not injected here
        beat(first_step + i, "profile")
        with record_function("batch"):
            inputs, targets = workload.global_batch(first_step + i, spec.global_batch_size)
            local_x, local_y = (t.to(ctx.device) for t in strategy.shard(inputs, targets))
        with record_function("forward_backward"), _autocast(spec, ctx.device):
            strategy.forward_backward(local_x, local_y, workload.loss)
        with record_function("optimizer_step"):
            strategy.optimizer_step()
        _sync(ctx.device)

    path = profiling.run_window(spec.profile_steps, spec.profile_dir, ctx.rank, ctx.device, step)
    return {"profile_trace": str(path)}


def _checkpoint_window(
    spec: CaseSpec,
    ctx: RankContext,
    strategy,
    workload,
    full_state: dict[str, int],
    batch: int,
    beat: Callable[[int, str], None],
) -> dict[str, Any]:
    """``--scaling-checkpoint`` (harness/measure/checkpoint.py): save, step, load, the same step again; after every
    other window, so neither its files nor its extra steps reach a measured figure. Steps without injected faults."""
    if not spec.checkpoint:
        return {}
    beat(batch, "checkpoint")
    return checkpoint.run_window(
        spec,
        ctx.rank,
        strategy,
        lambda i: _step(spec, ctx, strategy, workload, i, full_state, faults=False)[1],
        batch,
        lambda: _sync(ctx.device),
    )


def _step(
    spec: CaseSpec,
    ctx: RankContext,
    strategy,
    workload,
    step: int,
    full_state: dict[str, int],
    between: Callable[[torch.Tensor, torch.Tensor], tuple[float, bool]] | None = None,
    faults: bool = True,
    clock: ForwardClock | None = None,
) -> tuple[float, float]:
    """One distributed optimizer step between device syncs: (seconds, loss).

    ``between(inputs, targets)`` runs after forward/backward, before the optimizer step (the gradient
    check, state bytes); it returns (seconds to leave out of the step's time, skip this rank's update).
    ``faults=False`` leaves out the injected step faults: a parity companion is the clean baseline. ``clock``
    times the forward (harness/measure/clock.py); the injected straggler sleeps there.
    """
    inputs, targets = workload.global_batch(step, spec.global_batch_size)
    local_x, local_y = (t.to(ctx.device) for t in strategy.shard(inputs, targets))
    loss_fn = workload.loss if clock is None else clock.wrap(workload.loss, faults)
    _sync(ctx.device)
    t0 = time.perf_counter()
    if clock is not None:
        clock.start(t0)
    with _autocast(spec, ctx.device):
        loss = strategy.forward_backward(local_x, local_y, loss_fn)
    skip = False
    if between is not None:
        paused, skip = between(inputs, targets)
        t0 += paused  # bookkeeping is not the step's time
    if skip:
        strategy.optimizer.zero_grad(set_to_none=True)  # injected fault: this rank misses an update
    else:
        strategy.optimizer_step()
    if ctx.world_size > 1 and faults:
        _inject_comm_fault(spec, full_state)
        if spec.faults.delay_ms:
            time.sleep(spec.faults.delay_ms / 1000)
        if spec.faults.slowdown:  # relative to this step's own time, so the fault is the same size on any machine
            _sync(ctx.device)
            time.sleep(spec.faults.slowdown * (time.perf_counter() - t0))
    _sync(ctx.device)
    return time.perf_counter() - t0, float(loss) if loss is not None else float("nan")


def _local_window(
    spec: CaseSpec,
    ctx: RankContext,
    strategy,
    workload,
    full_state: dict[str, int],
    first_step: int,
    beat: Callable[[int, str], None],
) -> dict[str, Any]:
    """The same-launch reference (harness/measure/local_steps.py): after every measured window has closed."""
    if not spec.local_steps:
        return {}
    why = local_steps.unavailable(ctx, full_state)
    if why:
        return {"local_unavailable": why}
    local = local_steps.LocalStep(
        workload, spec, ctx, make_optimizer_factory(spec), lambda: _autocast(spec, ctx.device)
    )
    with local_steps.released(local):
        local(first_step, lambda: _sync(ctx.device))  # the copy's first step pays its lazy set-up: untimed
        times = local_steps.run_window(
            spec.local_steps,
            local,
            lambda s: _step(spec, ctx, strategy, workload, s, full_state)[0],
            first_step + 1,
            lambda: _sync(ctx.device),
            beat,
        )
    return times


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
    workload = workloads.resolve(spec)(spec.preset, spec.seed, data_dir, dims=spec.dims)
    torch.manual_seed(spec.seed)  # identical initial weights on every rank and in the reference
    model = workload.build_model()
    reference = Reference(model, spec, ctx.device, workload.loss) if spec.grad_check else None
    strategy = strategies.get(spec.strategy)(ctx, spec, workload=workload)  # its FSDP units, pipeline cuts
    beat(-1, "setup")
    full_state = model_state.full_replica_bytes(model)  # analytic: what one DDP replica would hold
    if spec.compile:  # in place, before the strategy wraps the blocks; the reference above stays eager
        compiling.compile_blocks(workload, model)
    strategy.setup(model, make_optimizer_factory(spec))
    compile_s = (
        compiling.compile_step(
            strategy,
            workload.global_batch(0, spec.global_batch_size),
            workload.loss,
            ctx.device,
            lambda: _sync(ctx.device),
            _autocast(spec, ctx.device),
        )
        if spec.compile
        else None
    )
    # parity's second strategy, stepping beside this one (None otherwise); its model counts in this launch's
    # memory and bytes, which parity does not judge
    companion = companions.build(
        spec,
        ctx,
        workload,
        make_optimizer_factory(spec),
        lambda other, i, faulted: _step(spec, ctx, other, workload, i, full_state, faults=faulted),
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


class _Window:
    """The measured window's instruments: bytes on the wire, peak memory, CPU time, and the injected ballast held
    through it. Opened just before the first measured step, closed right after the last one."""

    def __init__(self, spec: CaseSpec, ctx: RankContext) -> None:
        self.spec, self.ctx = spec, ctx
        self.process = psutil.Process()
        self.sampler = MemorySampler(ctx.device.type, ctx.device.index, interval_s=spec.memory_interval_ms / 1000)
        self.wire = WireCounter()
        self.ballast: torch.Tensor | None = None

    def open(self) -> None:
        self.wire.start()  # barrier-aligned counter reading: the window holds exactly the measured steps
        if self.ctx.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.ctx.device)
        self.cpu0 = self.process.cpu_times()
        self.sampler.__enter__()
        self.ballast = _inject_memory_fault(self.spec)

    def close(self) -> None:
        self.sampler.__exit__(None, None, None)
        self.ballast = None  # the sampler is done: free the injected ballast before the windows after the steps
        self.cpu1 = self.process.cpu_times()
        self.wire.stop()


class _Steps:
    """The rank's steps: untimed first (warm-up; the gradient check on the first, against a single-process
    reference that follows all of them), then the measured ones inside the window."""

    def __init__(self, spec: CaseSpec, ctx: RankContext, setup: _Setup) -> None:
        self.spec, self.ctx, self.setup = spec, ctx, setup
        # only the steps hold the reference, so that it is freed before the measured window opens
        self.reference, setup.reference = setup.reference, None
        self.unmeasured = max(spec.warmup, 1 if spec.grad_check else 0)
        self.step_flops = flops.StepFlops(enabled=ctx.rank == 0 and self.reference is not None)  # measure/flops.py
        self.clock = ForwardClock(ctx.rank, spec.faults.straggler_rank, spec.faults.straggler_ms)  # measure/clock.py
        self.times: list[float] = []
        self.losses: list[float] = []
        self.warmup_losses: list[float] = []
        self.check: dict[str, Any] = {}
        self.held: dict[str, int] = {}  # state bytes while the last step's gradients exist

    def run(self, window: _Window, beat: Callable[[int, str], None]) -> None:
        for step in range(self.unmeasured + self.spec.steps):
            beat(step, "step")
            _inject_stop_fault(self.spec, self.ctx, step)
            if step == self.unmeasured:
                self._end_reference()
                window.open()
            measured = step >= self.unmeasured
            companion = self.setup.companion
            elapsed, value = companion.interleave(step, self._main(step), measured) if companion else self._main(step)()
            self.clock.keep(measured)
            if measured:
                self.times.append(elapsed)
                self.losses.append(value)
            else:
                self.warmup_losses.append(value)

    def _end_reference(self) -> None:
        """After the untimed steps: compare the parameters the optimizer moved, then drop the reference."""
        if self.reference is not None:
            self.check["params"] = gradcheck.compare(self.setup.strategy.full_parameters(), self.reference.parameters())
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
        _inject_grad_fault(spec, ctx, strategy)
        if self.reference is not None:
            with self.step_flops.counting() if step == 0 else contextlib.nullcontext():  # the single process's step
                ref_grads = self.reference.step(
                    inputs.to(ctx.device), targets.to(ctx.device), _autocast(spec, ctx.device)
                )
            if step == 0:
                self.check["grads"] = gradcheck.compare(strategy.full_gradients(), ref_grads)
        paused = 0.0
        if step == self.unmeasured + spec.steps - 1:  # gradients exist only until the optimizer step
            t_state = time.perf_counter()
            self.held = strategy.state_bytes()
            paused = time.perf_counter() - t_state
        return paused, step == spec.faults.skip_step and ctx.rank == spec.faults.skip_step_rank


def _windows_after(
    spec: CaseSpec, ctx: RankContext, setup: _Setup, first: int, beat: Callable[[int, str], None]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The windows after the measured one, in this order (each leaves the ones before it untouched): the
    same-launch local steps, the profiler, the checkpoint. Returns (extra results, per-step series)."""
    strategy, workload, full_state = setup.strategy, setup.workload, setup.full_state
    extra = _local_window(spec, ctx, strategy, workload, full_state, first, beat)
    series = {k: extra.pop(k) for k in ("pair_step_times_s", "local_step_times_s") if k in extra}
    extra.update(_profile_window(spec, ctx, strategy, workload, first + 1 + spec.local_steps, beat))
    extra.update(_checkpoint_window(spec, ctx, strategy, workload, full_state, first + 1 + spec.local_steps, beat))
    extra.update(strategy.extra_results())
    return extra, series


def train(
    spec: CaseSpec,
    ctx: RankContext,
    data_dir: str | None = None,
    beat: Callable[[int, str], None] = lambda step, phase: None,
) -> RankResult:
    """``beat(step, phase)`` records progress (a heartbeat), called only outside the timed region."""
    started = time.perf_counter()
    setup = _setup(spec, ctx, data_dir, beat)
    steps = _Steps(spec, ctx, setup)
    window = _Window(spec, ctx)
    steps.run(window, beat)
    window.close()
    held = model_state.peak_state(steps.held, setup.strategy.state_bytes())
    first = steps.unmeasured + spec.steps
    extra, series = _windows_after(spec, ctx, setup, first, beat)
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
    window: _Window,
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
        peak_memory_bytes=sampler.peak_bytes,
        memory_source=sampler.source,
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
        wire=window.wire.result(spec.steps),
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
    that side never imports strategy code (DESIGN.md: it never imports the worker side)."""
    factor = strategy.wire_factor
    if isinstance(factor, dict):  # by backend: NCCL on CUDA ranks, gloo elsewhere
        factor = factor.get("nccl" if ctx.device.type == "cuda" else "gloo")
    return {
        "shards": list(strategy.shards),
        "shard_granularity": strategy.shard_granularity,
        "wire_factor": factor,
        "forward_collectives": strategy.forward_collectives,
    }
