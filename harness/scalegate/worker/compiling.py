"""``--scaling-compile``: the workload's blocks under ``torch.compile`` (worker side).

As torchtitan's ``apply_compile`` does, each block (``Workload.fsdp_blocks``: a transformer layer, a CNN stage)
is compiled in place before the strategy wraps the model, so FSDP's and TP's hooks stay outside the graphs and
identical blocks share one compiled graph. Compilation happens on first use: ``compile_step`` runs that first
forward and backward once, untimed, and reports how long it took (compilation plus one step), apart from the
measured steps. The gradient check's single-process reference stays eager: a compiled step must compute what
the eager model does.
"""

from __future__ import annotations

import time
from typing import Callable

import torch


def compile_blocks(workload, model: torch.nn.Module) -> int:
    blocks = workload.fsdp_blocks(model)
    for block in blocks:
        # The block's bound forward, not ``block.compile()``: that compiles ``_call_impl``, and Dynamo then traces
        # nothing when the block's class is torch's own (the cnn's nn.Sequential stages: no frame compiled, eager
        # steps, compile_s 0.06 s on CPU with torch 2.13 and 0.4 s on the H100 with 2.11). The forward compiles
        # for any class, keeps the parameters' names, and leaves the module's hooks (FSDP's, TP's) outside.
        block.forward = torch.compile(block.forward)
    return len(blocks)


def compiled_frames() -> int:
    """Frames Dynamo compiled in this process so far: 0 after ``compile_step`` means nothing was compiled."""
    from torch._dynamo.utils import counters

    return int(counters["frames"]["ok"])


def compile_step(
    strategy,
    batch: tuple[torch.Tensor, torch.Tensor],
    loss_fn,
    device: torch.device,
    sync: Callable[[], None],
    autocast,
) -> float:
    """Seconds of the first forward and backward (where torch.compile traces and compiles); gradients dropped."""
    inputs, targets = (t.to(device) for t in strategy.shard(*batch))
    sync()
    start = time.perf_counter()
    with autocast:
        strategy.forward_backward(inputs, targets, loss_fn)
    sync()
    seconds = time.perf_counter() - start
    strategy.optimizer.zero_grad(set_to_none=True)
    return seconds
