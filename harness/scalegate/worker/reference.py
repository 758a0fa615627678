"""The single-process reference a rank carries: the same model, unwrapped, computing what the strategy computes.

For most models that is one forward and backward of the whole global batch. BatchNorm in training mode is the
exception: it normalises with the statistics of the batch *it sees*, and under data parallelism each rank sees its
shard (a pipeline stage, each micro-batch), so DDP with BatchNorm is a different computation from one process on
the whole batch, by design and not by a bug. For models with such layers the reference therefore takes the pieces
the strategy's BatchNorm sees through the model one by one (``Strategy.norm_pieces``), averages their gradients,
and keeps the running statistics as the strategy does (``Strategy.running_statistics``). With
``Workload.sync_batchnorm`` the ranks normalise the whole batch (SyncBatchNorm), and so does the reference.
"""

from __future__ import annotations

import contextlib
import copy

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from scalegate.contract.spec import CaseSpec


def make_optimizer_factory(spec: CaseSpec):
    def make(params):
        return torch.optim.AdamW(params, lr=spec.lr)

    return make


def batch_statistics(model: nn.Module) -> bool:
    """Layers that normalise with the statistics of the batch they see (BatchNorm*), not of the global batch."""
    return any(isinstance(m, _BatchNorm) and not isinstance(m, nn.SyncBatchNorm) for m in model.modules())


def pieces_for(model: nn.Module, strategy, spec: CaseSpec, sync_batchnorm: bool) -> tuple[int, str]:
    """(pieces of the global batch the reference takes one by one, whose running statistics it keeps)."""
    if sync_batchnorm or spec.faults.whole_batch_reference or not batch_statistics(model):
        return 1, "first"
    return strategy.norm_pieces, strategy.running_statistics


class Reference:
    """The same model, unwrapped, stepping on the whole global batch in this one process."""

    def __init__(
        self,
        model: nn.Module,
        spec: CaseSpec,
        device: torch.device,
        loss_fn,
        pieces: int = 1,
        running: str = "first",
    ) -> None:
        # a SyncBatchNorm here would synchronise with the other ranks' references: one process has no one to wait for
        self.model = plain_batchnorm(copy.deepcopy(model)).to(device)
        self.optimizer = make_optimizer_factory(spec)(self.model.parameters())
        self.loss_fn = loss_fn
        self.pieces, self.running = pieces, running
        self.losses: list[float] = []  # the single-process curve at the same global batches

    def step(
        self, inputs: torch.Tensor, targets: torch.Tensor, autocast=contextlib.nullcontext()
    ) -> dict[str, torch.Tensor]:
        self.optimizer.zero_grad(set_to_none=True)
        if self.pieces == 1:
            with autocast:  # the same mixed precision as the strategy's forward, or bf16 would differ by design
                loss = self.loss_fn(self.model(inputs), targets)
            loss.backward()
            self.losses.append(float(loss.detach()))
        else:
            self.losses.append(self._pieces(inputs, targets, autocast))
        grads = {n: p.grad.detach().clone() for n, p in self.model.named_parameters() if p.grad is not None}
        self.optimizer.step()
        return grads

    def _pieces(self, inputs: torch.Tensor, targets: torch.Tensor, autocast) -> float:
        """Each piece through the model on its own (its own batch statistics); the mean of their losses, so the
        gradient is the mean of theirs, as the strategy's all-reduce (or micro-batch accumulation) makes it."""
        before = self._buffers()
        kept: dict[str, torch.Tensor] | None = None
        total = 0.0
        for i, (x, y) in enumerate(zip(inputs.chunk(self.pieces), targets.chunk(self.pieces))):
            if self.running == "first" and i > 0:
                self._load(before)  # each rank updates its statistics from the same start
            with autocast:
                loss = self.loss_fn(self.model(x), y) / self.pieces
            loss.backward()
            total += float(loss.detach())
            if i == 0:
                kept = self._buffers()
        if self.running == "first" and kept is not None:
            self._load(kept)  # rank 0's statistics (DDP broadcasts them; FSDP and ZeRO keep each rank's own)
        return total

    def _buffers(self) -> dict[str, torch.Tensor]:
        return {n: b.detach().clone() for n, b in self.model.named_buffers()}

    def _load(self, buffers: dict[str, torch.Tensor]) -> None:
        for name, buffer in self.model.named_buffers():
            buffer.copy_(buffers[name])

    def parameters(self) -> dict[str, torch.Tensor]:
        return {n: p.detach() for n, p in self.model.named_parameters()}

    def buffers(self) -> dict[str, torch.Tensor]:
        return {n: b.detach() for n, b in self.model.named_buffers()}


class _PlainBatchNorm(_BatchNorm):
    """SyncBatchNorm's arithmetic in one process: BatchNorm over any input rank, as SyncBatchNorm accepts."""

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")


def plain_batchnorm(module: nn.Module) -> nn.Module:
    """``module`` with every SyncBatchNorm replaced by a plain BatchNorm holding the same parameters and buffers
    (the inverse of ``nn.SyncBatchNorm.convert_sync_batchnorm``)."""
    if isinstance(module, nn.SyncBatchNorm):
        plain = _PlainBatchNorm(
            module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats
        )
        if module.affine:
            plain.weight, plain.bias = module.weight, module.bias
        plain.running_mean, plain.running_var = module.running_mean, module.running_var
        plain.num_batches_tracked = module.num_batches_tracked
        plain.train(module.training)
        return plain
    for name, child in module.named_children():
        replaced = plain_batchnorm(child)
        if replaced is not child:
            setattr(module, name, replaced)
    return module
