"""The small surface a strategy offers the training loop, and the rank context it runs in.

A strategy wraps a model and optimizer, runs forward/backward and the optimizer step, and can hand
back full (unsharded) gradients and parameters keyed by the unwrapped model's parameter names, so
correctness checks compare every strategy with a single process the same way.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar

if TYPE_CHECKING:
    import torch
    from torch import nn

    from harness.spec import CaseSpec
    from harness.topology import Topology


@dataclass(frozen=True, kw_only=True)
class RankContext:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    device: "torch.device"

    @property
    def nodes(self) -> int:
        return self.world_size // self.local_world_size


LossFn = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]
OptimizerFactory = Callable[..., "torch.optim.Optimizer"]


class Strategy:
    name: ClassVar[str]
    min_world: ClassVar[int] = 1
    max_world: ClassVar[int | None] = None
    min_nodes: ClassVar[int] = 1
    packages: ClassVar[tuple[str, ...]] = ()  # optional packages it imports
    needs_cuda: ClassVar[str] = ""  # non-empty: why it cannot run without CUDA devices

    @classmethod
    def unavailable(cls, topology: "Topology", device: str, devices_per_node: int) -> str | None:
        """Why this strategy cannot run this topology here (a skip reason), or None."""
        if topology.world_size < cls.min_world:
            return f"{cls.name} needs a world size >= {cls.min_world}, topology {topology} has {topology.world_size}"
        if cls.max_world is not None and topology.world_size > cls.max_world:
            return f"{cls.name} runs at most {cls.max_world} process(es), topology {topology} has {topology.world_size}"
        if topology.nodes < cls.min_nodes:
            return f"{cls.name} needs >= {cls.min_nodes} nodes, topology {topology} has {topology.nodes}"
        for package in cls.packages:
            if importlib.util.find_spec(package) is None:
                return f"{cls.name} needs the optional package {package!r}, which is not installed"
        if cls.needs_cuda and device != "cuda":
            return cls.needs_cuda
        return None

    def __init__(self, ctx: RankContext, spec: "CaseSpec") -> None:
        self.ctx = ctx
        self.spec = spec
        self.model: "nn.Module | None" = None  # the unwrapped model, for parameter names
        self.optimizer: "torch.optim.Optimizer | None" = None

    # --- data: which slice of the global batch this rank computes -------------------------------
    @property
    def data_rank(self) -> tuple[int, int]:
        """(index, count) of this rank among the data-parallel replicas."""
        return self.ctx.rank, self.ctx.world_size

    @property
    def loss_weight(self) -> float:
        """This rank's share of the global loss (its loss is the mean over its slice)."""
        return 1.0 / self.data_rank[1]

    def shard(self, inputs: "torch.Tensor", targets: "torch.Tensor") -> tuple["torch.Tensor", "torch.Tensor"]:
        index, count = self.data_rank
        per = inputs.shape[0] // count
        return inputs[index * per:(index + 1) * per], targets[index * per:(index + 1) * per]

    # --- training ---------------------------------------------------------------------------------
    def setup(self, model: "nn.Module", make_optimizer: OptimizerFactory) -> None:
        raise NotImplementedError

    def forward_backward(self, inputs: "torch.Tensor", targets: "torch.Tensor", loss_fn: LossFn) -> "torch.Tensor":
        raise NotImplementedError

    def optimizer_step(self) -> None:
        assert self.optimizer is not None
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    # --- correctness: full tensors, keyed by the unwrapped model's names (collective) ----------
    def full_gradients(self) -> dict[str, "torch.Tensor"]:
        assert self.model is not None
        return {n: p.grad.detach() for n, p in self.model.named_parameters() if p.grad is not None}

    def full_parameters(self) -> dict[str, "torch.Tensor"]:
        assert self.model is not None
        return {n: p.detach() for n, p in self.model.named_parameters()}

    def teardown(self) -> None:
        pass
