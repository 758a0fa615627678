"""The single-process reference a rank carries: the same model, unwrapped, on the whole global batch."""

from __future__ import annotations

import contextlib
import copy

import torch

from scalegate.contract.spec import CaseSpec


def make_optimizer_factory(spec: CaseSpec):
    def make(params):
        return torch.optim.AdamW(params, lr=spec.lr)

    return make


class Reference:
    """The same model, unwrapped, stepping on the whole global batch in this one process."""

    def __init__(self, model: torch.nn.Module, spec: CaseSpec, device: torch.device, loss_fn) -> None:
        self.model = copy.deepcopy(model).to(device)
        self.optimizer = make_optimizer_factory(spec)(self.model.parameters())
        self.loss_fn = loss_fn
        self.losses: list[float] = []  # the single-process curve at the same global batches

    def step(
        self, inputs: torch.Tensor, targets: torch.Tensor, autocast=contextlib.nullcontext()
    ) -> dict[str, torch.Tensor]:
        self.optimizer.zero_grad(set_to_none=True)
        with autocast:  # the same mixed precision as the strategy's forward, or bf16 would differ by design
            loss = self.loss_fn(self.model(inputs), targets)
        loss.backward()
        self.losses.append(float(loss))
        grads = {n: p.grad.detach().clone() for n, p in self.model.named_parameters() if p.grad is not None}
        self.optimizer.step()
        return grads

    def parameters(self) -> dict[str, torch.Tensor]:
        return {n: p.detach() for n, p in self.model.named_parameters()}
