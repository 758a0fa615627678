"""``nn.DataParallel``: one process drives every GPU of the node (the API the source reports used).

Each step scatters the batch over the GPUs, replicates the module onto them, and gathers outputs
and gradients back on the first GPU: the single-process bottleneck DDP was built to remove. It
needs at least two CUDA devices visible to one process, so it runs only as a one-process topology.
"""

from __future__ import annotations

import torch
from torch import nn

from scalegate.strategies.base import Strategy


class DP(Strategy):
    name = "dp"

    @property
    def norm_pieces(self) -> int:
        return torch.cuda.device_count()  # the batch is scattered over the GPUs; replica 0 keeps its statistics

    def setup(self, model, make_optimizer):
        self.model = model.to(self.ctx.device)
        self.wrapped = nn.DataParallel(
            self.model, device_ids=list(range(torch.cuda.device_count())), output_device=self.ctx.device
        )
        self.optimizer = make_optimizer(self.model.parameters())

    def forward_backward(self, inputs, targets, loss_fn):
        loss = loss_fn(self.wrapped(inputs), targets)
        loss.backward()
        return loss.detach()
