"""Lightning Fabric as a second front end: the same training through ``lightning.fabric.Fabric``.

The reports trained through Lightning, so its strategies are measured too, and ``fabric-ddp`` is
held to parity with raw ``ddp`` (scaling_tests/test_parity.py): Fabric's own overhead is a regression.

Fabric attaches to the process torchrun started: it detects torchelastic's environment, ``launch()``
creates no processes, and it joins the process group the worker already initialised. A parity launch
(harness/scalegate/worker/companion.py) trains raw ``ddp`` beside it in that same group: each wraps its own model in its
own ``DistributedDataParallel``, and every rank issues their collectives in one order. Lightning
refuses FSDP and DeepSpeed without CUDA; those refusals are the skip reasons below, quoted from
Lightning 2.6 (tests/test_strategies_ds_fabric.py runs them on CPU to keep the quotes true).
"""

from __future__ import annotations

from typing import Any, ClassVar

from scalegate.strategies.base import Strategy
from scalegate.strategies.deepspeed_zero import GatheredDeepSpeed


class SummonedFsdp:
    """Full gradients and parameters of a Lightning FSDP1 wrapper (``_fsdp_root``), for the agreement checks:
    Fabric's and the Trainer's FSDP share this (both wrap with use_orig_params=True)."""

    forward_collectives = True  # FSDP gathers parameters inside the forward

    model: Any

    def _fsdp_root(self):
        raise NotImplementedError

    def full_gradients(self) -> dict[str, Any]:
        from torch.distributed.fsdp import FullyShardedDataParallel

        with FullyShardedDataParallel.summon_full_params(self._fsdp_root(), with_grads=True, writeback=False):
            return {n: p.grad.detach().clone() for n, p in self.model.named_parameters() if p.grad is not None}

    def full_parameters(self) -> dict[str, Any]:
        from torch.distributed.fsdp import FullyShardedDataParallel

        with FullyShardedDataParallel.summon_full_params(self._fsdp_root(), writeback=False):
            return {n: p.detach().clone() for n, p in self.model.named_parameters()}


class FabricStrategy(Strategy):
    checkpoint_unavailable = (
        "Fabric saves through fabric.save/fabric.load with its own wrapped state; the window "
        "drives torch.distributed.checkpoint or DeepSpeed directly, which Fabric's wrappers hide"
    )
    fabric_strategy: ClassVar[str]  # Lightning's strategy name

    def _launch_fabric(self):
        from lightning.fabric import Fabric

        fabric = Fabric(
            accelerator="cuda" if self.ctx.device.type == "cuda" else "cpu",
            devices=self.ctx.local_world_size,
            num_nodes=self.ctx.nodes,
            strategy=self._fabric_strategy(),
            precision="bf16-mixed" if self.spec.run.dtype == "bf16" else "32-true",
        )
        fabric.launch()  # under torchrun: no new processes, reuses the existing process group
        return fabric

    def _fabric_strategy(self):
        return self.fabric_strategy

    def setup(self, model, make_optimizer):
        self.fabric = self._launch_fabric()
        self.model = model  # Fabric wraps it; its parameters keep the reference names
        self.wrapped, self.optimizer = self.fabric.setup(model, make_optimizer(model.parameters()))

    def forward_backward(self, inputs, targets, loss_fn):
        loss = loss_fn(self.wrapped(inputs), targets)
        self.fabric.backward(loss)
        return loss.detach()


class FabricDDP(FabricStrategy):
    name = "fabric-ddp"
    fabric_strategy = "ddp"
    wire_factor = 2.0  # the same DistributedDataParallel ring all-reduce as ddp


class FabricFSDP(SummonedFsdp, FabricStrategy):
    name = "fabric-fsdp"
    fabric_strategy = "fsdp"

    def _fsdp_root(self):
        return self.wrapped._forward_module  # Fabric's FullyShardedDataParallel (use_orig_params=True)


class FabricDeepSpeed(GatheredDeepSpeed, FabricStrategy):
    name = "fabric-deepspeed"
    fabric_strategy = "deepspeed"  # Lightning's default: ZeRO stage 2, the client optimizer allowed

    def _fabric_strategy(self):
        """Fabric's DeepSpeedStrategy with ``gradient_clipping: 0.0``. Fabric's config leaves the key out, and
        DeepSpeed then clips at its default norm of 1.0 (deepspeed/runtime/constants.py): the first H100 run's
        agreement check caught it (docs/gpu: parameters 0.15 apart after 3 steps, losses equal until the step after
        the first large gradient). The Trainer's DeepSpeedStrategy writes its ``gradient_clip_val`` (0.0) there; no
        other strategy here clips, nor does the reference."""
        if self.ctx.device.type != "cuda":
            return self.fabric_strategy  # Lightning refuses CPU with its own message (the skip reason quotes it)
        from lightning.fabric.strategies import DeepSpeedStrategy

        strategy = DeepSpeedStrategy(stage=2)
        strategy.config["gradient_clipping"] = 0.0
        return strategy
