"""Faults a case can inject into its own ranks (``--scaling-inject-fault``, ``Faults`` in the spec), so that every
gate can be shown to catch what it is for: a scaled gradient, a crash or hang, extra all-reduces, held memory."""

from __future__ import annotations

import time

import torch

from scalegate.contract.spec import CaseSpec
from scalegate.strategies.base import RankContext


def inject_grad_fault(spec: CaseSpec, ctx: RankContext, strategy) -> None:
    if spec.faults.grad_scale != 1.0 and ctx.rank == spec.faults.grad_scale_rank:
        for param in strategy.model.parameters():
            if param.grad is not None:
                param.grad.mul_(spec.faults.grad_scale)


def inject_stop_fault(spec: CaseSpec, ctx: RankContext, step: int) -> None:
    faults = spec.faults
    if ctx.rank == faults.crash_rank and step == faults.crash_step:
        raise RuntimeError(f"injected crash on rank {ctx.rank} at step {step} (--scaling-inject-fault)")
    if ctx.rank == faults.hang_rank and step == faults.hang_step:
        while True:  # injected hang: the other ranks block in this step's first collective
            time.sleep(3600)


def inject_comm_fault(spec: CaseSpec, full_state: dict[str, int]) -> None:
    """Injected fault: extra gradient-sized all-reduces every step (a duplicated collective)."""
    import torch.distributed as dist

    if spec.faults.extra_allreduce and dist.is_initialized():
        buffer = torch.zeros(full_state["params"] // 4, device=comm_device())
        for _ in range(spec.faults.extra_allreduce):
            dist.all_reduce(buffer)


def inject_memory_fault(spec: CaseSpec) -> torch.Tensor | None:
    """Injected fault: memory held through the measured steps (written, so its pages are resident)."""
    mb = spec.faults.hold_memory_mb
    return torch.ones(mb << 18, device=comm_device()) if mb else None


def comm_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
