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


def tensor_bytes(tensors: Iterable[torch.Tensor | None], seen: dict | None = None) -> int:
    """Sum of local bytes, every byte of a storage counted once: views into a flat buffer (DeepSpeed's
    per-parameter gradient partitions) overlap it. ``seen`` shares the de-duplication across calls."""
    seen = {} if seen is None else seen
    total = 0
    for t in tensors:
        if t is None or not isinstance(t, torch.Tensor):
            continue
        local = local_tensor(t)
        size = local.numel() * local.element_size()
        try:
            storage = local.untyped_storage().data_ptr()
            start = local.storage_offset() * local.element_size()
        except (RuntimeError, NotImplementedError):  # tensors without storage (fake, meta)
            storage, start = id(local), 0
        total += _claim(seen.setdefault(storage, []), start, start + size)
    return total


def _claim(taken: list[tuple[int, int]], start: int, end: int) -> int:
    """Bytes of [start, end) not yet in ``taken`` (disjoint intervals); merges it in."""
    covered = sum(max(0, min(b, end) - max(a, start)) for a, b in taken)
    keep = [(a, b) for a, b in taken if b < start or a > end]
    merged = [(a, b) for a, b in taken if not (b < start or a > end)]
    lo = min([start] + [a for a, _ in merged])
    hi = max([end] + [b for _, b in merged])
    taken[:] = keep + [(lo, hi)]
    return end - start - covered


def optimizer_tensors(optimizer: torch.optim.Optimizer | None) -> list[torch.Tensor]:
    """Every tensor in the optimizer's per-parameter state (exp_avg, exp_avg_sq, step, ...)."""
    if optimizer is None:
        return []
    # ZeroRedundancyOptimizer keeps its real (partition-only) state in a local optimizer ``optim``.
    inner = getattr(optimizer, "optim", None)
    if isinstance(inner, torch.optim.Optimizer):
        optimizer = inner
    state = getattr(optimizer, "state", {}) or {}
    return [
        v
        for per_param in state.values()
        if isinstance(per_param, dict)
        for v in per_param.values()
        if isinstance(v, torch.Tensor)
    ]


def module_state_bytes(parameters: list[torch.Tensor], optimizer: torch.optim.Optimizer | None) -> dict[str, int]:
    """Generic accounting: the given parameters, their ``.grad``s and the optimizer's state."""
    seen: dict = {}
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


def deepspeed_state_bytes(model: torch.nn.Module, optimizer: object) -> dict[str, int]:
    """DeepSpeed ZeRO keeps its state outside ``param.grad`` and ``optimizer.state``: flat fp32
    partitions (the master copy and the fp32 gradient copy it steps with, counted as ``master``:
    DDP has neither), gradient partitions in its own buffers, and, at stage 3, each parameter's
    partition in ``param.ds_tensor``."""
    seen: dict = {}
    params = list(model.parameters())
    stage3_parts = [getattr(p, "ds_tensor", None) for p in params]
    held_params = tensor_bytes([p for p in params if getattr(p, "ds_tensor", None) is None] + stage3_parts, seen)
    masters = list(getattr(optimizer, "single_partition_of_fp32_groups", None) or [])
    masters += list(getattr(optimizer, "fp32_partitioned_groups_flat", None) or [])
    grads: list = []
    for name in ("grads_in_partition", "grad_partitions_flat_buffer"):
        grads.append(getattr(optimizer, name, None))
    averaged = getattr(optimizer, "averaged_gradients", None) or {}
    for group in averaged.values() if isinstance(averaged, dict) else averaged:
        grads += list(group or [])
    grads += [p.grad for p in params]
    inner = getattr(optimizer, "optimizer", None)
    held_grads = tensor_bytes(grads, seen)  # first: a master gradient that is a view of these counts once, here
    return {
        "params": held_params,
        "grads": held_grads,
        "master": tensor_bytes(masters + [getattr(m, "grad", None) for m in masters], seen),
        "optimizer": tensor_bytes(
            optimizer_tensors(inner if isinstance(inner, torch.optim.Optimizer) else optimizer), seen
        ),
    }
