"""DeepSpeed ZeRO stages 1, 2 and 3: one engine, its config generated from the spec.

Stage 1 shards the optimizer state, stage 2 also the gradients, stage 3 also the parameters. The
optimizer is the same ``torch.optim.AdamW`` the single-process reference uses (built by the worker's
factory and handed to the engine), so parameters can be compared after a few steps; DeepSpeed only
accepts an optimizer of its own unless ``zero_allow_untested_optimizer`` is set.

The engine reuses the process group the worker created (torchrun's env:// rendezvous): DeepSpeed's
``init_distributed`` sees ``torch.distributed`` initialised and only wraps it. On CPU its first job on
a machine JIT-builds a shared-memory comm op into ``~/.cache/torch_extensions`` (about a minute;
setup.sh warms it once); training collectives still go through the gloo process group.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from scalegate.strategies.base import Strategy

CHECKPOINT_TAG = "scalegate"  # one fixed tag: the window writes one checkpoint and reads it back


class DeepSpeedZero(Strategy):
    stage: ClassVar[int]
    checkpoint_format = "deepspeed"

    def config(self) -> dict[str, Any]:
        """The DeepSpeed config for this spec: no accumulation, no clipping, the reference's optimizer."""
        return {
            "train_micro_batch_size_per_gpu": self.spec.local_batch,
            "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": self.stage},
            "bf16": {"enabled": self.spec.run.dtype == "bf16"},
            "gradient_clipping": 0.0,
            "zero_allow_untested_optimizer": True,  # the client's torch AdamW, same as the reference
            "steps_per_print": 1 << 30,  # no per-step log lines inside timed steps
            "wall_clock_breakdown": False,
        }

    def setup(self, model, make_optimizer):
        import deepspeed

        deepspeed.utils.logger.setLevel(logging.WARNING)  # its INFO config dump buries the rank logs
        self.model = model.to(self.ctx.device)
        optimizer = make_optimizer(self.model.parameters())
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=self.model, optimizer=optimizer, config=self.config(), dist_init_required=False
        )

    def forward_backward(self, inputs, targets, loss_fn):
        loss = loss_fn(self.engine(inputs), targets)
        self.engine.backward(loss)
        return loss.detach()

    def optimizer_step(self) -> None:
        self.engine.step()  # steps the ZeRO optimizer and zeroes the gradients

    def full_gradients(self):
        return gathered_gradients(self.model)

    def full_parameters(self):
        return gathered_parameters(self.model)

    def save_checkpoint(self, directory: str) -> None:
        """DeepSpeed's own format (DCP does not know its flat partitions): per-rank ZeRO shards under a tag."""
        self.engine.save_checkpoint(directory, tag=CHECKPOINT_TAG)

    def load_checkpoint(self, directory: str, optimizer: bool = True) -> None:
        path, _ = self.engine.load_checkpoint(
            directory, tag=CHECKPOINT_TAG, load_optimizer_states=optimizer, load_lr_scheduler_states=optimizer
        )
        if path is None:
            raise RuntimeError(f"DeepSpeed found no checkpoint under {directory} (tag {CHECKPOINT_TAG!r})")

    def teardown(self) -> None:
        self.engine.destroy()

    def state_bytes(self):
        from scalegate.measure.state_bytes import deepspeed_state_bytes  # flat partitions live outside param.grad

        return deepspeed_state_bytes(self.model, self.optimizer)


def gathered_gradients(model) -> dict[str, Any]:
    """The averaged fp32 gradients of a DeepSpeed-managed model, gathered from their shards.

    Valid only between ``engine.backward`` and ``engine.step`` (the step frees them). Collective for
    the sharded stages: every rank calls it, in the same parameter order.
    """
    from deepspeed.utils import safe_get_full_grad

    grads = {}
    for name, param in model.named_parameters():
        grad = safe_get_full_grad(param)
        if grad is not None:
            grads[name] = grad.detach().clone().reshape(_full_shape(param))
    return grads


def gathered_parameters(model) -> dict[str, Any]:
    """The fp32 master weights the ZeRO optimizer updates, gathered from their shards (collective)."""
    from deepspeed.utils import safe_get_full_fp32_param

    params = {}
    for name, param in model.named_parameters():
        full = safe_get_full_fp32_param(param)  # None where DeepSpeed keeps no separate master copy
        params[name] = (full if full is not None else param).detach().clone().reshape(_full_shape(param))
    return params


def _full_shape(param):
    return getattr(param, "ds_shape", param.shape)  # stage 3 leaves an empty local tensor in param


class GatheredDeepSpeed:
    """Full gradients and parameters of a DeepSpeed-managed ``model``, for the agreement checks: the front ends
    that hand their model to DeepSpeed (Fabric's and the Trainer's) share this, as ``SummonedFsdp`` for FSDP."""

    model: Any

    def full_gradients(self) -> dict[str, Any]:
        return gathered_gradients(self.model)

    def full_parameters(self) -> dict[str, Any]:
        return gathered_parameters(self.model)


class DeepSpeedZero1(DeepSpeedZero):
    name = "deepspeed-zero1"
    stage = 1
    shards = ("optimizer",)
    wire_factor = {"gloo": 3.0}  # measured on loopback: gradient reduction (2) + parameter all-gather (1)


class DeepSpeedZero2(DeepSpeedZero):
    name = "deepspeed-zero2"
    stage = 2
    shards = ("grads", "optimizer")
    wire_factor = {"gloo": 3.0}


class DeepSpeedZero3(DeepSpeedZero):
    forward_collectives = True  # parameters are gathered inside the forward
    name = "deepspeed-zero3"
    stage = 3
    shards = ("params", "grads", "optimizer")
