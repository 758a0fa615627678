"""The bootstrap a rank runs a team's own training script through (``CaseSpec.script``): nothing in it changed.

The script runs in this process as ``__main__`` (``runpy.run_path``), with its own arguments, in its own repository,
with the rank environment torchrun gave this process (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...);
it creates its own process group. The bootstrap watches its optimizer steps through torch's global optimizer step
hooks (DeepSpeed's engines, Accelerate's and Lightning's wrappers all end in a torch optimizer's step). One training
step is counted once, whatever wraps the optimizer:

- only the first optimizer that steps counts, so a second one (a GAN's, an empty one) does not double the count;
- a step of it counts only if a backward pass ran since the step counted before it (``torch.autograd.backward``,
  which ``loss.backward()`` calls): DeepSpeed's ZeRO optimizers step the torch optimizer once per parameter group
  (an HF Trainer's AdamW has two), Lightning's closure runs its backward inside the step, and gradient accumulation
  runs several backwards before one step, so each of these is one count;
- AMP's ``GradScaler.step`` that skips the optimizer (an inf gradient) still ends a training step.

A step lasts from the first counted step call to the next, so the per-group calls after it fall into the next step:
every step is measured between the same two points. A loop with no torch optimizer marks its steps with
``scalegate.step()``, and then only those count. What the pytest side checks of the result (one peak of step times,
as many steps as the script's own log numbers) is harness/scalegate/checks/script.py's ``measurement``.

Steps ``warmup .. warmup + steps - 1`` are the measured window (at least one step before it: a step lasts from the
end of the step before it to its own end). On CPU a step is timed with the host clock at the end of each
``optimizer.step()``; on CUDA with an event recorded there, and one host sync when the window closes, not one per
step. The window's instruments are the workloads' (peak memory, bytes on the wire, CPU time: measured.py), opened
in the hook that ends the step before the window and closed in the hook of its last step. The loss curve is read
from rank 0's own output with the case's ``loss_pattern`` (harness/scalegate/worker/script_loss.py: its log files, read when
the window closes and when the script ends; a stream that is no file is wrapped).
"""

from __future__ import annotations

import functools
import math
import os
import runpy
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from scalegate.contract import affinity, atomic, heartbeat
from scalegate.contract.errors import SpecError
from scalegate.contract.results import RankResult
from scalegate.contract.spec import CaseSpec
from scalegate.measure import binding, turns
from scalegate.measure.memory import cuda_peaks
from scalegate.strategies.base import RankContext
from scalegate.worker import script_loss
from scalegate.worker.measured import MeasuredWindow

ACTIVE: StepClock | None = None  # the clock of the script this process runs (scalegate.step() finds it here)


class WindowClosed(BaseException):
    """Raised from the step hook on every rank at the same step to stop a script after its measured window
    (``stop_after_window``); a BaseException, so the script's own ``except Exception`` does not swallow it."""


class StepClock:
    """Counts the script's optimizer steps, times the measured window, and writes the rank's result."""

    def __init__(self, spec: CaseSpec, ctx: RankContext, out_dir: Path, beat: Callable[[int, str], None]) -> None:
        self.spec, self.ctx, self.out_dir = spec, ctx, out_dir
        self.beats = heartbeat.Deferred(beat)  # the beat is inside the step here: a thread writes it
        self.first = max(spec.run.warmup, 1)  # a step before the window marks where its first step starts
        self.last = self.first + spec.run.steps - 1
        self.count = 0  # optimizer steps completed
        self.marks: list[Any] = []  # the end of steps first-1 .. last: host times (CPU) or CUDA events
        self.starts: list[Any] = []  # in a duet: the start of steps first .. last, marked when the turn is granted
        self.counted: int | None = None  # id() of the optimizer whose steps count
        self.counted_name: str | None = None  # its class
        self.manual = False  # scalegate.step() was called: only those calls count
        self.backwards = 0  # backward passes seen (torch.autograd.backward)
        self.backwards_at_step = -1  # ... when the last step was counted
        self.calls = 0  # step calls of the counted optimizer, including those folded into a training step
        self.group_size: int | None = None  # the script's default process group when the window opened (1: none)
        self.window = MeasuredWindow(spec, ctx)
        self.times: list[float] = []
        self.in_window = False  # between the first mark and the last: collectives are timed into the step
        self.comm = 0.0  # seconds this step spent in blocking collectives called from Python
        self.collective_s: list[float] = []  # per measured step
        self.losses: list[tuple[float, float]] = []  # (the script's step, or the line's index; loss), rank 0
        self.loss_source: script_loss.Losses | None = None  # rank 0's output, where the case has a loss_pattern
        self.binding: dict[str, Any] = {"cpus": None, "why": "a script's ranks are bound only in a duet"}
        self.started = time.perf_counter()
        self.step_started = self.started

    # --- the hooks --------------------------------------------------------------------------------------------
    def optimizer_hook(self, optimizer: torch.optim.Optimizer, args: Any = (), kwargs: Any = None) -> None:
        if self.manual:
            return
        if self.spec.faults.count_every_step:  # injected: every call of every optimizer, as a naive hook counts
            self.calls += 1
            self.counted_name = self.counted_name or type(optimizer).__name__
            return self.on_step()
        if self.counted is None:
            self.counted = id(optimizer)
            self.counted_name = type(optimizer).__name__
        if id(optimizer) != self.counted:
            return
        self.calls += 1
        if self.backwards and self.backwards == self.backwards_at_step:
            return  # the same training step: another parameter group's call, or a GradScaler's after its step
        self.backwards_at_step = self.backwards
        self.on_step()

    def backward_seen(self) -> None:
        self.backwards += 1

    def manual_step(self) -> None:
        self.manual = True
        self.on_step()

    def on_step(self) -> None:
        step, self.count = self.count, self.count + 1
        self.beats.step(step)
        if step == self.first - 1:
            self.group_size = _group_size()
            self.window.open()  # its barrier and idle reading happen before the mark: not in a step's time
            self._mark()
            self.in_window, self.comm = True, 0.0
        elif self.first <= step <= self.last:
            if self.spec.faults.slowdown and self.ctx.world_size > 1:  # injected: this step, a fraction longer
                self._slow_down()
            self._mark()
            self.window.step()
            self.collective_s.append(self.comm)
            self.comm = 0.0
            if step == self.last:
                self.in_window = False
                self._close()
                if self.spec.script.stop_after_window:  # type: ignore[union-attr]
                    raise WindowClosed()
        # a duet's turn (docs/duet.md): the next step starts when it is granted, so waiting is in no step's time
        turns.ACTIVE.turn(step)
        paired = turns.ACTIVE.paired
        if paired and step == 0 and self.ctx.device.type == "cpu":
            # after the script's first step its process group exists: gloo's threads stay free unless the user binds them
            threads = affinity.gloo_threads(self.spec.duet.threads, self.spec.strategy, script=True)
            self.binding = binding.bind(self.spec.run.cpu_threads, duet=True, duet_threads=threads)
        if paired and self.first - 1 <= step < self.last:
            self.starts.append(self._now())
        self.step_started = time.perf_counter()  # the host clock of the next step's start (its turn's grant)

    def _slow_down(self) -> None:
        """``--scaling-inject-slowdown``: sleep that fraction of the step's own time so far (from its turn's grant
        in a duet), inside the step, as the harness's loop does."""
        if self.ctx.device.type == "cuda":
            torch.cuda.synchronize(self.ctx.device)
        time.sleep(self.spec.faults.slowdown * (time.perf_counter() - self.step_started))

    def _now(self) -> Any:
        if self.ctx.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _mark(self) -> None:
        self.marks.append(self._now())

    def _close(self) -> None:
        # each step from the end of the one before it, or in a duet from its turn's grant
        starts = self.starts if len(self.starts) == len(self.marks) - 1 else self.marks[:-1]
        if self.ctx.device.type == "cuda":
            torch.cuda.synchronize(self.ctx.device)
            self.times = [a.elapsed_time(b) / 1000 for a, b in zip(starts, self.marks[1:])]
        else:
            self.times = [b - a for a, b in zip(starts, self.marks[1:])]
        self.window.close()
        if self.loss_source is not None:
            self.loss_source.read()
        self.write()  # now, so a script that later exits hard keeps its measurement

    # --- the rank's result ------------------------------------------------------------------------------------
    def check(self) -> None:
        """After the script: it must have run the whole window."""
        needed = self.last + 1
        if self.count == 0:
            raise SpecError(
                f"{self.spec.case_id}: the script never called an optimizer step",
                "step a torch.optim optimizer (DeepSpeed's and Lightning's do), or mark each training step with "
                "scalegate.step() (docs/your-script.md)",
            )
        if self.count < needed:
            raise SpecError(
                f"{self.spec.case_id}: the script stopped after {self.count} optimizer steps; the case needs {needed} "
                f"({self.first} before the window, {self.spec.run.steps} measured)",
                "raise its step count (a marker argument like --max-steps={steps} runs what the case needs) or "
                "lower --scaling-steps / --scaling-warmup",
            )

    def write(self) -> None:
        window, steps = self.window, self.spec.run.steps
        script = self.spec.script
        batch = script.batch if script is not None else None
        result = RankResult(
            rank=self.ctx.rank,
            world_size=self.ctx.world_size,
            node_rank=self.ctx.node_rank,
            host=socket.gethostname(),
            device=str(self.ctx.device),
            step_times_s=self.times,
            losses=[math.nan] * steps,  # the script's loss is its output's: extra["loss_curve"]
            warmup_losses=[],
            loss_weight=0.0,
            **window.memory(),
            cpu_user_s=window.cpu1.user - window.cpu0.user,
            cpu_system_s=window.cpu1.system - window.cpu0.system,
            wall_s=time.perf_counter() - self.started,
            memory_interval_s=window.sampler.interval_s,
            memory_timeline=window.sampler.timeline(),
            cuda_memory=cuda_peaks(self.ctx.device),
            wire=window.wire.result(steps),
            ledger=window.ledger.result(),
            cpu_wait=window.cpu_wait.result(),
            extra={
                "script": True,
                "optimizer_steps": self.count,
                "steps_marked_by": "scalegate.step()" if self.manual else "optimizer.step()",
                "optimizer_step_calls": self.calls,  # of the counted optimizer: > optimizer_steps where calls folded
                "counted_optimizer": self.counted_name,
                "backward_calls": self.backwards,
                "process_group_size": self.group_size,  # != world_size: the ranks trained alone (checks/script.py)
                "loss_curve": [list(p) for p in self.losses],
                "loss_read_from": self.loss_source.how if self.loss_source else [],  # [stdout, stderr]: file/wrapped
                "collective_s": self.collective_s,  # blocking collectives the script called, per measured step
                "throughput_unit": "samples/s" if batch else "steps/s",
                "cpu_binding": self.binding,
                **({"duet": turns.ACTIVE.summary()} if turns.ACTIVE.summary() else {}),
                **({"gpu_state": window.sampler.gpu_state()} if self.ctx.device.type == "cuda" else {}),
            },
        )
        atomic.write_json(self.out_dir / f"rank{self.ctx.rank}.json", result.__dict__)


def _group_size() -> int:
    """The size of the script's default process group, 1 where it has none: a stack that never joined the job's
    group (Accelerate on a CPU-only machine without ``cpu=True``) trains each rank alone, without a word."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


# torch.distributed's collectives a script calls from Python: timed while the window is open (their host time is the
# step's exposed communication: blocking calls hide nothing). DDP's and FSDP's own collectives run in C++ and
# overlap the backward; what of them the compute does not hide shows in the step time and the efficiency.
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "reduce",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
    "barrier",
)


def _time_collectives(clock: StepClock) -> Callable[[], None]:
    """Wrap the collectives for the script's run; returns what puts them back."""
    import torch.distributed as dist

    saved = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}

    def timed(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if not clock.in_window:
                return fn(*args, **kwargs)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                clock.comm += time.perf_counter() - start

        return call

    for name, fn in saved.items():
        setattr(dist, name, timed(fn))
    return lambda: [setattr(dist, name, fn) for name, fn in saved.items()]  # type: ignore[func-returns-value]


def _watch_training_steps(clock: StepClock) -> Callable[[], None]:
    """Count backward passes, and let a GradScaler step that skipped its optimizer end a step; returns the undo."""
    backward = torch.autograd.backward
    scaler_step = torch.amp.GradScaler.step

    @functools.wraps(backward)
    def counted_backward(*args: Any, **kwargs: Any) -> Any:
        clock.backward_seen()
        return backward(*args, **kwargs)

    @functools.wraps(scaler_step)
    def scaled_step(self: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        out = scaler_step(self, optimizer, *args, **kwargs)
        if isinstance(optimizer, torch.optim.Optimizer):
            clock.optimizer_hook(optimizer)  # folded into the step if the optimizer stepped; else it ends it
        return out

    torch.autograd.backward, torch.amp.GradScaler.step = counted_backward, scaled_step

    def undo() -> None:
        torch.autograd.backward, torch.amp.GradScaler.step = backward, scaler_step

    return undo


def run(spec: CaseSpec, ctx: RankContext, out_dir: Path, beat: Callable[[int, str], None]) -> None:
    """Run the case's script to its end (or its window's) under the step clock, then write the rank's result."""
    global ACTIVE
    script = spec.script
    assert script is not None
    clock = ACTIVE = StepClock(spec, ctx, out_dir, beat)
    handle = register_optimizer_step_post_hook(clock.optimizer_hook)
    untime = _time_collectives(clock)
    unwatch = _watch_training_steps(clock)
    streams = sys.stdout, sys.stderr
    if ctx.rank == 0 and script.loss_pattern:
        clock.loss_source = script_loss.Losses(script.loss_pattern, clock.losses)
    argv, cwd = sys.argv, os.getcwd()
    sys.argv = [script.path, *script.argv]
    os.chdir(script.cwd)
    sys.path.insert(0, os.path.dirname(script.path))  # as `python train.py` puts the script's directory first
    clock.beats.now(-1, "script")
    try:
        runpy.run_path(script.path, run_name="__main__")
    except WindowClosed:
        pass
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    finally:
        clock.beats.close()
        if clock.loss_source is not None:
            clock.loss_source.close()
        handle.remove()
        untime()
        unwatch()
        sys.stdout, sys.stderr = streams
        sys.argv = argv
        os.chdir(cwd)
        ACTIVE = None
    clock.check()
    clock.write()
