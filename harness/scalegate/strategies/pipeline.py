"""Pipeline parallelism with ``torch.distributed.pipelining``: GPipe and 1F1B schedules.

Rank i holds stage i of the model, cut at the workload's ``split_points``
(``Workload.pipeline_stages``); activations flow forward and gradients backward between
neighbouring ranks. Every rank sees the whole global batch, split into micro-batches (one per
stage unless the spec says otherwise). The loss, computed only on the last stage, is the mean of
per-micro-batch means, which equals the single process's mean for equal micro-batches: gradients
must agree with it like any other strategy's.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from scalegate.contract.errors import SpecError
from scalegate.strategies.base import Strategy


class Pipeline(Strategy):
    forward_collectives = True  # activations cross ranks inside the forward
    checkpoint_unavailable = (
        "pipeline stages hold different modules on each rank and the window's parity step "
        "runs the schedule, not a full model: a per-stage checkpoint is not built here"
    )
    schedule_class: ClassVar[type]
    running_statistics = "all"  # a stage's BatchNorm sees every micro-batch, one after another

    @property
    def data_rank(self):
        return 0, 1  # every stage sees the whole global batch; micro-batches split it in time

    @property
    def norm_pieces(self) -> int:
        return self.spec.microbatches or self.ctx.world_size  # BatchNorm normalises each micro-batch

    @property
    def is_last(self) -> bool:
        return self.ctx.rank == self.ctx.world_size - 1

    @property
    def loss_weight(self):
        return 1.0 if self.is_last else 0.0

    def setup(self, model, make_optimizer):
        world, rank = self.ctx.world_size, self.ctx.rank
        workload = self.workload
        self.model = model
        self.names = {id(p): n for n, p in model.named_parameters()}
        stages = workload.pipeline_stages(model, world)
        if len(stages) != world:
            raise SpecError(
                f"{self.spec.case_id}: workload {workload.name!r} returned {len(stages)} pipeline stages "
                f"for {world} ranks",
                "pipeline_stages(model, n) must return exactly n modules",
            )
        self.microbatches = self.norm_pieces
        if self.spec.global_batch_size % self.microbatches:
            raise SpecError(
                f"{self.spec.case_id}: global batch {self.spec.global_batch_size} does not split into "
                f"{self.microbatches} equal micro-batches",
                "pick a micro-batch count that divides the global batch",
            )
        self.tied = _tied(stages, self.names)
        self.stage_module = stages[rank].to(self.ctx.device)
        self.stage = PipelineStage(_Contiguous(self.stage_module), rank, world, self.ctx.device)
        self.loss_fn = None  # set per step; the schedule calls it through _loss on the last stage
        self.schedule = self.schedule_class(self.stage, self.microbatches, loss_fn=self._loss)
        self.optimizer = make_optimizer(self.stage_module.parameters())

    def _loss(self, output, target):
        return self.loss_fn(output, target)

    def forward_backward(self, inputs, targets, loss_fn):
        self.loss_fn = loss_fn
        loss = None
        if self.ctx.rank == 0:
            self.schedule.step(inputs)
        elif not self.is_last:
            self.schedule.step()
        else:
            losses: list[torch.Tensor] = []
            self.schedule.step(target=targets, losses=losses, return_outputs=False)
            loss = torch.stack([loss.detach() for loss in losses]).mean()
        self._sum_tied()
        return loss

    def _sum_tied(self) -> None:
        """A parameter that two stages share (tied input and output embeddings) gets part of its gradient in each:
        the sum is its gradient, on every stage that holds it, so their optimizers take the same step."""
        named = dict(self.model.named_parameters())
        for name, holders in self.tied:
            param = named[name]
            held = self.ctx.rank in holders and param.grad is not None
            grad = param.grad if held else torch.zeros(param.shape, dtype=param.dtype, device=self.ctx.device)
            dist.all_reduce(grad)  # every rank takes part, in the same order: the others add zeros
            if self.ctx.rank in holders:
                param.grad = grad

    def _gather(self, grads: bool) -> dict[str, torch.Tensor]:
        # Each stage's tensors go to every rank, keyed by the full model's names (collective).
        local = {
            self.names[id(p)]: (p.grad if grads else p).detach().cpu()
            for p in self.stage_module.parameters()
            if not grads or p.grad is not None
        }
        parts: list[dict[str, torch.Tensor]] = [{} for _ in range(self.ctx.world_size)]
        dist.all_gather_object(parts, local)
        return {name: tensor for part in parts for name, tensor in part.items()}

    def full_gradients(self):
        return self._gather(grads=True)

    def state_bytes(self):
        from scalegate.measure.state_bytes import module_state_bytes  # only this rank's stage is trained here

        return module_state_bytes(list(self.stage_module.parameters()), self.optimizer)

    def full_parameters(self):
        return self._gather(grads=False)


def _tied(stages: list[nn.Module], names: dict[int, str]) -> list[tuple[str, list[int]]]:
    """Parameters held by more than one stage, with the stages that hold them, in the same order on every rank."""
    holders: dict[int, list[int]] = {}
    for index, stage in enumerate(stages):
        for param in stage.parameters():
            holders.setdefault(id(param), []).append(index)
    return [(names[key], ranks) for key, ranks in holders.items() if len(ranks) > 1]


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the gradient contiguous (e.g. a batch-first LSTM's input
    gradient is a transposed view), since it is sent back to the previous stage."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


class _Contiguous(nn.Module):
    """A stage whose outputs and input gradients are contiguous: point-to-point send/recv refuse
    strided tensors (an RNN's last time step ``out[:, -1]``, a transposed gradient), and the
    receiving stage allocates its buffers with the sender's strides."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        args = tuple(_ContiguousGrad.apply(a) if torch.is_tensor(a) and a.is_floating_point() else a for a in args)
        out = self.inner(*args)
        return tuple(t.contiguous() for t in out) if isinstance(out, tuple) else out.contiguous()


class GPipe(Pipeline):
    name = "pipeline-gpipe"  # all forwards, then all backwards: simple, holds every micro-batch's activations
    schedule_class = ScheduleGPipe


class OneFOneB(Pipeline):
    name = "pipeline-1f1b"  # one forward, one backward interleaved: activations of at most W micro-batches
    schedule_class = Schedule1F1B
