"""Bytes of model state a rank actually holds: parameters, gradients, optimizer state (worker side).

Sharded tensors count only their local shard (a DTensor counts ``to_local()``), and a tensor seen
twice (a parameter shared by two modules, a gradient that is a view of a flat buffer) counts once
per storage, so the numbers are what this rank keeps in memory, not what the model would need.

``full_replica_bytes`` is the analytic reference: what one DDP replica holds for the same model
with AdamW (parameters + gradients + two moments per element), computed from the model definition
so no DDP run is needed to judge a sharded strategy.
"""

from __future__ import annotations

from typing import Iterable

import torch

# AdamW keeps exp_avg and exp_avg_sq per element (the scalar ``step`` per tensor is ignored:
# a few bytes per tensor, inside every tolerance).
ADAM_STATES_PER_ELEMENT = 2


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The part of ``t`` stored on this rank (a DTensor's local shard, else ``t`` itself)."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def tensor_bytes(tensors: Iterable[torch.Tensor | None], seen: set | None = None) -> int:
    """Sum of local bytes, each storage counted once (``seen`` shares de-duplication across calls)."""
    seen = set() if seen is None else seen
    total = 0
    for t in tensors:
        if t is None or not isinstance(t, torch.Tensor):
            continue
        local = local_tensor(t)
        try:
            key = (local.untyped_storage().data_ptr(), local.storage_offset(), local.numel())
        except (RuntimeError, NotImplementedError):  # tensors without storage (fake, meta)
            key = id(local)
        if key in seen:
            continue
        seen.add(key)
        total += local.numel() * local.element_size()
    return total


def optimizer_tensors(optimizer: torch.optim.Optimizer | None) -> list[torch.Tensor]:
    """Every tensor in the optimizer's per-parameter state (exp_avg, exp_avg_sq, step, ...)."""
    if optimizer is None:
        return []
    # ZeroRedundancyOptimizer keeps its real (partition-only) state in a local optimizer ``optim``.
    inner = getattr(optimizer, "optim", None)
    if isinstance(inner, torch.optim.Optimizer):
        optimizer = inner
    state = getattr(optimizer, "state", {}) or {}
    return [v for per_param in state.values() if isinstance(per_param, dict)
            for v in per_param.values() if isinstance(v, torch.Tensor)]


def module_state_bytes(parameters: list[torch.Tensor], optimizer: torch.optim.Optimizer | None) -> dict[str, int]:
    """Generic accounting: the given parameters, their ``.grad``s and the optimizer's state."""
    seen: set = set()
    return {
        "params": tensor_bytes(parameters, seen),
        "grads": tensor_bytes((p.grad for p in parameters), seen),
        "optimizer": tensor_bytes(optimizer_tensors(optimizer), seen),
    }


def full_replica_bytes(model: torch.nn.Module) -> dict[str, int]:
    """What one unsharded replica holds with AdamW, from the model definition (analytic)."""
    params = list(model.parameters())
    nbytes = sum(p.numel() * p.element_size() for p in params)
    return {
        "params": nbytes,
        "grads": nbytes,
        "optimizer": ADAM_STATES_PER_ELEMENT * nbytes,
        "largest_tensor": max((p.numel() * p.element_size() for p in params), default=0),
        "tensors": len(params),
    }


def peak_state(*readings: dict[str, int]) -> dict[str, int]:
    """Per kind, the largest reading: gradients exist before the optimizer step, moments after it."""
    out: dict[str, int] = {}
    for reading in readings:
        for kind, value in reading.items():
            out[kind] = max(out.get(kind, 0), int(value))
    return out
