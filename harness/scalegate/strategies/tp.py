"""Tensor parallelism (``torch.distributed.tensor.parallel``), and 2-D FSDP x TP as torchtitan runs it.

``tp``: one node's ranks split every attention and MLP matmul (the workload's ``tensor_parallel_plan``:
q/k/v and the MLP's up projections column-wise, output and down projections row-wise); they all see the same
batch. ``fsdp-tp``: a ("dp", "tp") ``DeviceMesh`` (``harness/scalegate/contract/parallel_dims.py``), TP within a node, FSDP2
across nodes on top of it (``fully_shard(block, mesh=mesh["dp"])`` over the TP-parallelized blocks).
``--scaling-tp-sequence-parallel`` shards the norms along the sequence (``SequenceParallel``): the row-wise
all-reduces become reduce-scatters and the column-wise inputs all-gathers.

The 1/tp promise covers the parameters the plan shards (``Workload.tensor_parallel_sharded``); embeddings,
norms and the output head stay replicated across a TP group and are not promised. Bytes on the wire are
predicted from the activations: 4 all-reduces of a (batch, seq, dim) activation per block and step (2 forward
after the row-wise matmuls, 2 backward into the column-wise inputs), ring all-reduce 2(tp-1)/tp each; with
sequence parallelism all-gathers and reduce-scatters instead (``activation_bytes``).
"""

from __future__ import annotations

from typing import Any

from scalegate.contract.parallel_dims import ParallelDims
from scalegate.strategies.base import Strategy
from scalegate.strategies.fsdp import FSDP, FullTensors
from scalegate.strategies.fsdp import full as _full


class TP(FullTensors, Strategy):
    forward_collectives = True  # activations cross ranks inside the forward
    name = "tp"
    shards = ()  # the promise is on the TP-sharded subset (extra_results), not on the whole state

    def parallel_dims(self) -> ParallelDims:
        dims = ParallelDims(dp=self.ctx.nodes, tp=self.ctx.local_world_size, world_size=self.ctx.world_size)
        dims.check_divides(self.workload.tensor_parallel_divisors(), self.workload.name)
        return dims

    @property
    def data_rank(self):
        return self.ctx.node_rank, self.ctx.nodes  # a TP group shares its batch; data parallel across nodes

    @property
    def loss_weight(self) -> float:
        return 1.0 / self.ctx.world_size  # every rank of a TP group reports its group's whole loss

    def setup(self, model, make_optimizer):
        from torch.distributed.tensor.parallel import parallelize_module

        dims = self.parallel_dims()
        self.mesh = dims.mesh(self.ctx.device.type)
        self.model = model.to(self.ctx.device)
        self.sharded_names = set(self.workload.tensor_parallel_sharded(self.model))
        plan = self.workload.tensor_parallel_plan(
            self.model, sequence_parallel=self.spec.execution.tp_sequence_parallel
        )
        parallelize_module(self.model, self.mesh["tp"], plan)
        self.wrap_data_parallel(self.mesh)
        self.optimizer = make_optimizer(self.model.parameters())

    def wrap_data_parallel(self, mesh) -> None:
        """Plain TP has one TP group (one node): nothing to do."""

    def shard_group_size(self) -> int:
        return self.ctx.local_world_size

    def _subset(self) -> list:
        named = dict(self.model.named_parameters())
        return [named[n] for n in sorted(self.sharded_names)]

    def state_bytes(self) -> dict[str, int]:
        """The whole state, as every strategy reports it; the TP-sharded subset's is kept at its largest (the
        training loop reads this while gradients exist, and again after the last optimizer step)."""
        from scalegate.measure.state_bytes import peak_state, tensor_bytes

        subset, seen = self._subset(), {}
        moments = [v for p in subset for v in self.optimizer.state.get(p, {}).values() if hasattr(v, "numel")]
        reading = {
            "params": tensor_bytes(subset, seen),
            "grads": tensor_bytes((p.grad for p in subset), seen),
            "optimizer": tensor_bytes(moments, seen),
        }
        self._tp_held = peak_state(getattr(self, "_tp_held", {}), reading)
        return super().state_bytes()

    def extra_results(self) -> dict[str, Any]:
        """The TP-sharded subset's bytes (held here, and a full replica's), and the predicted activation bytes."""
        subset = self._subset()
        full = sum(_full(p.detach()).numel() * p.element_size() for p in subset)
        return {
            "tp": {
                "degree": self.ctx.local_world_size,
                "sequence_parallel": self.spec.execution.tp_sequence_parallel,
                "sharded_params": len(subset),
                "held": getattr(self, "_tp_held", {}),
                "full_params_bytes": full,
                "activation_bytes_per_rank": self.activation_bytes(),
                "analytic_bytes_per_rank": self.activation_bytes() + self.data_parallel_bytes(full),
            }
        }

    def activation_bytes(self) -> float:
        """Bytes one rank sends per step for the activations' collectives, each moving (tp-1)/tp of a (batch, seq,
        dim) activation per rank and pass: without sequence parallelism 4 ring all-reduces a block (2x each);
        with it 4 all-gathers (1x) and 4 reduce-scatters (1x; gloo runs them as all-reduces, 2x) a block, plus the
        scatter into the first block and the gather before the head (forward and backward)."""
        tp = self.ctx.local_world_size
        d = self.workload.preset.dims
        batch = self.spec.global_batch_size // self.ctx.nodes
        size = batch * d["seq_len"] * d["dim"] * (2 if self.spec.run.dtype == "bf16" else 4) * (tp - 1) / tp
        if not self.spec.execution.tp_sequence_parallel:
            return size * 2 * 4 * d["layers"]
        scatter = 1 if self.ctx.device.type == "cuda" else 2
        return size * (d["layers"] * (4 + 4 * scatter) + 2 + scatter)

    def data_parallel_bytes(self, sharded_full: int) -> float:
        """Plain TP has no data-parallel traffic."""
        return 0.0


class FSDPTP(TP):
    name = "fsdp-tp"

    def wrap_data_parallel(self, mesh) -> None:
        from torch.distributed.fsdp import fully_shard

        for block in self.workload.fsdp_blocks(self.model):
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(self.model, mesh=mesh["dp"])

    def shard_group_size(self) -> int:
        return self.ctx.world_size  # the TP subset: 1/tp by TP, then 1/dp of that by FSDP

    def data_parallel_bytes(self, sharded_full: int) -> float:
        """FSDP over the dp mesh of what a TP rank holds (its 1/tp of the sharded weights, all of the replicated
        ones): all-gather forward and backward and a reduce-scatter, which gloo runs as an all-reduce (fsdp.py)."""
        total = sum(_full(p.detach()).numel() * p.element_size() for p in self.model.parameters())
        per_tp_rank = total - sharded_full + sharded_full / self.ctx.local_world_size
        factor = FSDP.wire_factor["nccl" if self.ctx.device.type == "cuda" else "gloo"]
        return factor * (self.ctx.nodes - 1) / self.ctx.nodes * per_tp_rank
