"""``DistributedDataParallel``: full replica per rank, gradients averaged by bucketed all-reduce."""

from __future__ import annotations

from torch.nn.parallel import DistributedDataParallel

from scalegate.strategies.base import Strategy


class DDP(Strategy):
    name = "ddp"
    wire_factor = 2.0  # ring all-reduce of the gradients: 2(W-1)/W x gradient bytes per rank

    def setup(self, model, make_optimizer):
        self.model = model.to(self.ctx.device)
        device_ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
        self.wrapped = DistributedDataParallel(self.model, device_ids=device_ids)
        self.optimizer = make_optimizer(self.wrapped.parameters())

    def forward_backward(self, inputs, targets, loss_fn):
        loss = loss_fn(self.wrapped(inputs), targets)
        loss.backward()
        return loss.detach()
