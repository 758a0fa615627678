"""The same-launch reference: distributed steps interleaved with local, communication-free steps.

After the measured window has closed (times, memory, bytes), every rank builds a plain, unwrapped
copy of the model and alternates: one distributed step of the strategy, then one *local* step of
the copy on the rank's own share of the global batch (global batch / W samples, the work one device
would do alone for its share), all ranks at once. Both are timed on every rank. The launcher pairs
them, pair ``i`` = (slowest rank's local step i, slowest rank's distributed step i), and the
*local efficiency* of the launch is the median over pairs of local / distributed
(``harness/scalegate/figures/stats.py``). Because both halves of a pair run within milliseconds of each other on the
same cores, a slow phase of the host slows both, and the ratio keeps what the strategy itself costs.

The copy is built from the workload with the case's seed *after* the memory sampler and the wire
counter have stopped, so it never inflates peak memory or bytes on the wire. Where a full replica
cannot fit next to the strategy's state on the device, the window is skipped and says why; the gate
then falls back to the separate 1x1 launch (``harness/scalegate/judge``). Worker side.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

import torch

MEMORY_MARGIN = 1.5  # a replica's params + grads + AdamW state, plus activations, must fit this many times


def unavailable(ctx, full_state: dict[str, int]) -> str | None:
    """Why a full local replica cannot be built on this rank's device, or None."""
    if ctx.world_size < 2:
        return "a single process is its own reference"
    if ctx.device.type != "cuda":
        return None  # host memory: a replica of the model that already fits once fits twice here
    free, _ = torch.cuda.mem_get_info(ctx.device)
    need = MEMORY_MARGIN * sum(full_state.values())
    if need > free:
        return (
            f"a local replica needs ~{need / 2**30:.1f} GiB and the device has {free / 2**30:.1f} GiB free: "
            "the gate falls back to the separate 1x1 launch"
        )
    return None


class LocalStep:
    """An unwrapped copy of the workload's model stepping alone on this rank's share of each global batch."""

    def __init__(self, workload, spec, ctx, make_optimizer, autocast: Callable[[], Any]) -> None:
        torch.manual_seed(spec.run.seed)  # the same initial weights as the strategy's model
        self.model = workload.build_model().to(ctx.device)
        self.optimizer = make_optimizer(self.model.parameters())
        self.workload, self.spec, self.ctx, self.autocast = workload, spec, ctx, autocast
        self.share = spec.global_batch_size // ctx.world_size

    def __call__(self, step: int, sync: Callable[[], None]) -> float:
        inputs, targets = self.workload.global_batch(step, self.spec.global_batch_size)
        lo = self.ctx.rank * self.share
        x, y = inputs[lo : lo + self.share].to(self.ctx.device), targets[lo : lo + self.share].to(self.ctx.device)
        sync()
        t0 = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            loss = self.workload.loss(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        sync()
        return time.perf_counter() - t0


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def run_window(
    pairs: int,
    local: LocalStep,
    distributed_step: Callable[[int], float],
    first_step: int,
    sync: Callable[[], None],
    beat: Callable[[int, str], None],
) -> dict[str, list[float]]:
    """``pairs`` (distributed, local) step pairs; every rank must call it with the same ``pairs``.

    A barrier (outside the timed region) before each half starts every rank's local step together, as the
    distributed step starts them together; without it the between-launch spread of the estimate is wider, since a
    machine phase then reaches one half of a pair and not the other
    (docs/evidence/detection.md#designing-the-same-launch-reference).
    """
    dist_times: list[float] = []
    local_times: list[float] = []
    for step in range(first_step, first_step + pairs):
        beat(step, "local-window")
        barrier()
        dist_times.append(distributed_step(step))
        barrier()
        local_times.append(local(step, sync))
    return {"pair_step_times_s": dist_times, "local_step_times_s": local_times}


@contextlib.contextmanager
def released(local: LocalStep):
    """Drop the copy when the window is done: nothing of it outlives the window."""
    try:
        yield local
    finally:
        local.model = None  # type: ignore[assignment]
        local.optimizer = None  # type: ignore[assignment]
