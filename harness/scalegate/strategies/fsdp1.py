"""FSDP1 (``FullyShardedDataParallel``), the API the source reports used; CUDA only.

torch refuses it without an accelerator, so on CPU the case skips quoting torch's own refusal.
"""

from __future__ import annotations

import functools

from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy

from scalegate.strategies.base import Strategy

# The text torch 2.13 raises when FullyShardedDataParallel is built on a machine without a GPU.


class FSDP1(Strategy):
    forward_collectives = True  # parameters are gathered inside the forward
    name = "fsdp1"
    shards = ("params", "grads", "optimizer")  # FULL_SHARD

    def setup(self, model, make_optimizer):
        self.model = model.to(self.ctx.device)
        blocks = {id(block) for block in self.workload.fsdp_blocks(self.model)}
        policy = functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda module: id(module) in blocks)
        # use_orig_params keeps the original parameter names and views, so the optimizer and the
        # correctness checks see the same names as the reference model.
        self.wrapped = FullyShardedDataParallel(
            self.model,
            auto_wrap_policy=policy,
            device_id=self.ctx.device,
            sharding_strategy=ShardingStrategy.FULL_SHARD,
            use_orig_params=True,
        )
        self.optimizer = make_optimizer(self.wrapped.parameters())

    def forward_backward(self, inputs, targets, loss_fn):
        loss = loss_fn(self.wrapped(inputs), targets)
        loss.backward()
        return loss.detach()

    def _gathered(self, grads: bool):
        with FullyShardedDataParallel.summon_full_params(self.wrapped, with_grads=grads, writeback=False):
            return {
                _clean(n): (p.grad if grads else p).detach().clone()
                for n, p in self.wrapped.named_parameters()
                if not grads or p.grad is not None
            }

    def full_gradients(self):
        return self._gathered(grads=True)

    def full_parameters(self):
        return self._gathered(grads=False)


def _clean(name: str) -> str:
    # FSDP1 inserts "_fsdp_wrapped_module." into names; strip it to get the reference's names.
    return name.replace("_fsdp_wrapped_module.", "")
