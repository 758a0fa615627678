"""FSDP2 (``torch.distributed.fsdp.fully_shard``): parameters, gradients and optimizer state sharded.

Each block the workload names (``Workload.fsdp_blocks``, default: every direct child with
parameters) is sharded as its own unit, then the root, so parameters are all-gathered block by
block during forward/backward instead of all at once. Parameters become DTensors; the full tensors
for correctness checks are their ``full_tensor()`` (a collective all-gather).
"""

from __future__ import annotations

from typing import Any

from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from scalegate.strategies.base import Strategy


def full(tensor):
    """The whole tensor of a DTensor (a collective all-gather), else the tensor itself."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


class FullTensors:
    """Full gradients and parameters of a model whose parameters are DTensors (FSDP2, TP): their ``full_tensor()``."""

    model: Any

    def full_gradients(self):
        return {n: full(p.grad).detach() for n, p in self.model.named_parameters() if p.grad is not None}

    def full_parameters(self):
        return {n: full(p.detach()) for n, p in self.model.named_parameters()}


class FSDP(FullTensors, Strategy):
    forward_collectives = True  # parameters are gathered inside the forward
    name = "fsdp"
    shards = ("params", "grads", "optimizer")
    # all-gather in forward and backward (1 + 1) + reduce-scatter (1); gloo's reduce-scatter moves an
    # all-reduce's bytes (2), measured on loopback
    wire_factor = {"nccl": 3.0, "gloo": 4.0}

    def device_mesh(self):
        """None: FSDP2's default 1-D mesh over the whole world (HSDP overrides this)."""
        return None

    def setup(self, model, make_optimizer):
        self.model = model.to(self.ctx.device)
        mesh = self.device_mesh()
        kwargs = {"mesh": mesh} if mesh is not None else {}
        for block in self.workload.fsdp_blocks(self.model):
            fully_shard(block, **kwargs)
        fully_shard(self.model, **kwargs)
        self.optimizer = make_optimizer(self.model.parameters())
