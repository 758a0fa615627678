"""The small surface a strategy offers the training loop, and the rank context it runs in.

A strategy wraps a model and optimizer, runs forward/backward and the optimizer step, and can hand
back full (unsharded) gradients and parameters keyed by the unwrapped model's parameter names, so
correctness checks compare every strategy with a single process the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar

if TYPE_CHECKING:
    import torch
    from torch import nn

    from scalegate.contract.cards import StrategyCard
    from scalegate.contract.spec import CaseSpec
    from scalegate.workloads.base import Workload


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
    # What the strategy promises to shard over its shard group ("params", "grads", "optimizer"),
    # judged by harness/scalegate/checks/sharding.py against an unsharded replica; "tensor" granularity means whole
    # tensors are assigned to ranks (ZeroRedundancyOptimizer), so one rank may hold the largest one.
    shards: ClassVar[tuple[str, ...]] = ()
    shard_granularity: ClassVar[str] = "element"
    # Bytes each rank sends per step = wire_factor * (S-1)/S * parameter bytes (S = world size);
    # 2 for a ring all-reduce of the gradients, 3 for all-gather (fwd + bwd) + reduce-scatter.
    # A dict keys it by backend: gloo runs reduce-scatter as an all-reduce (measured: 2x the bytes).
    # None: no simple formula (activations on the wire); the measurement is still recorded.
    wire_factor: ClassVar[float | dict[str, float] | None] = None
    # It gathers or exchanges inside the forward (FSDP, ZeRO-3, TP, pipelines): forward times then do not show which
    # rank arrives last at the collectives (harness/scalegate/figures/stragglers.py)
    forward_collectives: ClassVar[bool] = False
    # --scaling-checkpoint (harness/scalegate/measure/checkpoint.py): non-empty says why this strategy's state cannot be saved
    # and restored by the window, which then reports it as unavailable instead of failing the case
    checkpoint_unavailable: ClassVar[str] = ""
    checkpoint_format: ClassVar[str] = "torch.distributed.checkpoint"
    # Whose BatchNorm running statistics the single-process reference keeps (harness/scalegate/worker/reference.py): "first",
    # the first piece's (DDP broadcasts rank 0's buffers before every forward; FSDP and ZeRO keep each rank's own,
    # so rank 0's are the reference's), or "all" pieces in order (a pipeline stage sees every micro-batch)
    running_statistics: ClassVar[str] = "first"

    @property
    def card(self) -> "StrategyCard":
        """What the pytest side knows of this strategy (harness/scalegate/contract/cards.py)."""
        from scalegate.contract.cards import card

        return card(self.name)

    def __init__(self, ctx: RankContext, spec: "CaseSpec", workload: "Workload | None" = None) -> None:
        self.ctx = ctx
        self.spec = spec
        self._workload = workload
        self.model: "nn.Module | None" = None  # the unwrapped model, for parameter names
        self.optimizer: "torch.optim.Optimizer | None" = None

    @property
    def workload(self) -> "Workload":
        """The worker's own workload object (its dims and data directory): FSDP units, pipeline cuts.

        The worker hands it over; a strategy built without one (a test) gets the spec's workload afresh.
        """
        if self._workload is None:
            from scalegate import workloads

            self._workload = workloads.resolve(self.spec)(self.spec.preset, self.spec.run.seed, dims=self.spec.dims)
        return self._workload

    # --- data: which slice of the global batch this rank computes -------------------------------
    @property
    def data_rank(self) -> tuple[int, int]:
        """(index, count) of this rank among the data-parallel replicas."""
        return self.ctx.rank, self.ctx.world_size

    @property
    def loss_weight(self) -> float:
        """This rank's share of the global loss (its loss is the mean over its slice)."""
        return 1.0 / self.data_rank[1]

    @property
    def norm_pieces(self) -> int:
        """Pieces of the global batch that BatchNorm normalises separately under this strategy: one per
        data-parallel rank (each normalises its own shard); the reference takes the same pieces one by one."""
        return self.data_rank[1]

    def shard(self, inputs: "torch.Tensor", targets: "torch.Tensor") -> tuple["torch.Tensor", "torch.Tensor"]:
        index, count = self.data_rank
        per = inputs.shape[0] // count
        return inputs[index * per : (index + 1) * per], targets[index * per : (index + 1) * per]

    # --- training ---------------------------------------------------------------------------------
    def setup(self, model: "nn.Module", make_optimizer: OptimizerFactory) -> None:
        raise NotImplementedError

    def forward_backward(self, inputs: "torch.Tensor", targets: "torch.Tensor", loss_fn: LossFn) -> "torch.Tensor":
        """The model's forward, the loss, its backward; the loss for the record. A strategy whose model is wrapped
        (DDP, an engine, pipeline stages) overrides this."""
        loss = loss_fn(self.model(inputs), targets)
        loss.backward()
        return loss.detach()

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

    def shard_group_size(self) -> int:
        """Ranks that split one copy of the sharded state (the world; HSDP: ranks within a replica)."""
        return self.ctx.world_size

    def state_bytes(self) -> dict[str, int]:
        """Bytes of parameters, gradients and optimizer state this rank holds (local shards only).

        Generic: the unwrapped model's parameters (a DTensor counts its local shard), their
        ``.grad``, and the optimizer's per-parameter state. Override where the strategy keeps state
        elsewhere (DeepSpeed's flat partitions).
        """
        from scalegate.measure.state_bytes import module_state_bytes

        assert self.model is not None
        return module_state_bytes(list(self.model.parameters()), self.optimizer)

    # --- checkpoints (harness/scalegate/measure/checkpoint.py): collective, every rank calls them ---------------
    def save_checkpoint(self, directory: str) -> None:
        """Model and optimizer state with ``torch.distributed.checkpoint``: each rank writes its own shards
        (DTensors of FSDP2 and TP) or, for a replica (DDP), the part DCP's planner assigns it."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optim = get_state_dict(self.model, self.optimizer)
        dcp.save({"model": model, "optim": optim}, checkpoint_id=directory)

    def load_checkpoint(self, directory: str, optimizer: bool = True) -> None:
        """Restore what ``save_checkpoint`` wrote, in place; ``optimizer=False`` restores the model alone (the
        injected fault a resumed run without its optimizer state is)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_model_state_dict, set_state_dict

        model, optim = get_state_dict(self.model, self.optimizer)
        if not optimizer:
            dcp.load({"model": model}, checkpoint_id=directory)
            set_model_state_dict(self.model, model)
            return
        dcp.load({"model": model, "optim": optim}, checkpoint_id=directory)
        set_state_dict(self.model, self.optimizer, model_state_dict=model, optim_state_dict=optim)

    def extra_results(self) -> dict[str, Any]:
        """Strategy-specific figures for the rank's ``extra`` results (the Lightning Trainer's own step clock)."""
        return {}

    def teardown(self) -> None:
        pass
