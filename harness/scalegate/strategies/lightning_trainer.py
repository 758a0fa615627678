"""The Lightning *Trainer* front end: ``lightning.pytorch.Trainer.fit`` trains the workload as a LightningModule.

The reports trained ``pl.Trainer(strategy="ddp" | "fsdp" | "deepspeed")``, so the Trainer's own loop is what
is measured: its fit loop, data fetcher, automatic optimisation (closure, ``LightningOptimizer``, precision
plugin), hooks and its strategy's wrapping. Driving Lightning's strategy objects directly would measure
Fabric again (``fabric-*``), not the Trainer.

How the Trainer's loop fits the harness's step-by-step control: ``trainer.fit`` runs as a coroutine (a
greenlet on the rank's own thread) and a ``Callback`` (``_Pacer``) switches back to the harness at fixed points
of every step, so exactly one of the two runs at any time (their collectives go through the one process group
in one order, which is what lets a parity companion step beside it). The harness's timed step becomes:

- ``forward_backward``: hand the batch over; the Trainer runs ``training_step`` and the backward pass, and
  stops in ``on_before_optimizer_step`` (gradients reduced, not yet applied): the harness checks them
  against the single process there, as for every strategy.
- ``optimizer_step``: let the Trainer go on; it applies the update, ends the batch, runs its loop's
  bookkeeping and fetches the next batch, and stops in the next ``on_train_batch_start``. So everything the
  Trainer does per step lies inside the harness's timed step (device sync before each clock reading,
  warm-up excluded, the same records as every strategy: losses, times, memory, bytes, agreement).

The dataloader yields ``StepBatch`` slots (Lightning's fetcher prefetches one batch ahead, before the harness
has chosen it); the pacer fills each slot with the harness's global-batch slice when its step starts, and
``training_step`` unpacks it like ``(x, y)``. The pacer also times each step from inside the Trainer
(``trainer_step_times_s`` in the rank's extra results, to compare with the harness's clock).

Attaching to the ranks torchrun started (SLURM runs torchrun per node too): ``TorchElasticEnvironment`` is
passed explicitly, with ``devices`` and ``num_nodes`` from the rank context, so Lightning spawns nothing and
joins the process group the worker already initialised. Lightning refuses FSDP and DeepSpeed without CUDA;
those refusals are the skip reasons below, quoted from Lightning 2.6 (tests/test_lightning_trainer.py
raises them on CPU to keep the quotes true).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import torch

from scalegate.contract.errors import SpecError
from scalegate.strategies.base import Strategy
from scalegate.strategies.deepspeed_zero import GatheredDeepSpeed
from scalegate.strategies.fabric import SummonedFsdp


class StepBatch:
    """One step's batch, filled when the step starts; unpacks like ``(inputs, targets)``."""

    def __init__(self) -> None:
        self.items: tuple[torch.Tensor, ...] = ()

    def __iter__(self):
        return iter(self.items)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.items[index]

    def __len__(self) -> int:
        return len(self.items)


class _Slots(torch.utils.data.IterableDataset):
    def __iter__(self):
        while True:  # endless: the harness ends the epoch (the module's on_train_batch_start returns -1)
            yield StepBatch()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Pacer:
    """The hand-over between the harness and the Trainer's loop, which runs in a greenlet: a coroutine on
    the rank's own thread. Switching costs microseconds; OS threads handing over through a queue cost
    1-3 ms a step on a loaded 2-core host (measured: harness clock 48.6 ms vs the Trainer's own 45.2 ms),
    which would have been charged to Lightning. Also the Trainer-side step clock."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.glet = None  # the Trainer's greenlet
        self.harness = None  # the harness's greenlet (the rank's main one)
        self.stopping = False
        self.loss: torch.Tensor | None = None
        self.step_times_s: list[float] = []
        self._t0: float | None = None
        self._paused = 0.0

    def callback(self):
        from lightning.pytorch.callbacks import Callback

        pacer = self

        class Pacer(Callback):
            def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
                pacer.batch_start(batch)

            def on_before_optimizer_step(self, trainer, pl_module, optimizer):
                pacer.after_backward()

        return Pacer()

    # --- Trainer side: ("ready",) | ("backward", loss) to the harness, which answers ("batch", x, y) | ("go",) | ("stop",)
    def batch_start(self, batch: StepBatch) -> None:
        _sync(self.device)
        if self._t0 is not None:  # the previous step ends here: update, batch end, loop, next fetch
            self.step_times_s.append(time.perf_counter() - self._t0 - self._paused)
        message = self.harness.switch(("ready",))
        if message[0] == "stop":
            self.stopping = True
            return
        batch.items = message[1:]
        _sync(self.device)
        self._t0, self._paused = time.perf_counter(), 0.0

    def after_backward(self) -> None:
        t_pause = time.perf_counter()
        message = self.harness.switch(("backward", self.loss))
        assert message[0] == "go", message
        self._paused += time.perf_counter() - t_pause  # the harness's gradient check is not the step's time

    # --- harness side --------------------------------------------------------------------------------
    def start(self, fit) -> None:
        import greenlet

        self.harness = greenlet.getcurrent()
        self.glet = greenlet.greenlet(fit)
        self.expect("ready", None)  # the Trainer has set up (its collectives done) and waits for step 0

    def expect(self, kind: str, message: tuple | None) -> tuple:
        """Hand ``message`` to the Trainer and run it to its next stop; an exception it raises surfaces here.
        ``None`` starts it (``fit`` takes no arguments)."""
        reply = self.glet.switch() if message is None else self.glet.switch(message)
        if reply is None or reply[0] != kind:
            raise RuntimeError(f"the Lightning Trainer's loop ended ({reply!r}) where the harness expected {kind!r}")
        return reply


def _harness_module(model: torch.nn.Module, loss_fn):
    """A built-in workload's plain model as a LightningModule: ``training_step`` is the harness's loss."""
    import lightning.pytorch as pl

    class HarnessModule(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = model

        def training_step(self, batch, batch_idx):
            inputs, targets = batch
            return loss_fn(self.net(inputs), targets)

    return HarnessModule()


class LightningTrainerStrategy(Strategy):
    checkpoint_unavailable = (
        "the Lightning Trainer owns its loop and checkpoints (ModelCheckpoint, trainer.save_"
        "checkpoint); the window cannot take a step outside it"
    )
    trainer_strategy: ClassVar[str]  # Lightning's strategy name

    def _trainer(self, pacer: _Pacer):
        import lightning.pytorch as pl
        from lightning.fabric.plugins.environments import TorchElasticEnvironment

        if not TorchElasticEnvironment.detect():
            raise SpecError(
                f"{self.name} runs inside the ranks torchrun starts, and this process has no torchrun "
                "environment (RANK, WORLD_SIZE, LOCAL_RANK, TORCHELASTIC_RUN_ID)",
                "run it as a scalegate case (pytest scaling_tests ... or python -m scalegate), "
                "which launches the ranks",
            )
        return pl.Trainer(
            accelerator="cuda" if self.ctx.device.type == "cuda" else "cpu",
            devices=self.ctx.local_world_size,
            num_nodes=self.ctx.nodes,
            strategy=self._lightning_strategy(),
            plugins=[TorchElasticEnvironment()],
            precision="bf16-mixed" if self.spec.run.dtype == "bf16" else "32-true",
            max_epochs=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            use_distributed_sampler=False,
            callbacks=[pacer.callback()],
        )

    def _lightning_strategy(self):
        return self.trainer_strategy

    def _module(self, model, make_optimizer):
        """The LightningModule the Trainer fits: the user's own, or the harness's wrapper of a plain model.

        Its optimizer is the harness's (the single-process reference steps the same AdamW), and its
        ``training_step`` is wrapped to keep the loss for the harness's record."""
        import lightning.pytorch as pl

        module = model if isinstance(model, pl.LightningModule) else _harness_module(model, self.workload.loss)
        module.configure_optimizers = lambda: make_optimizer(module.parameters())
        step, start = module.training_step, module.on_train_batch_start

        def training_step(*args, **kwargs):
            out = step(*args, **kwargs)
            loss = out["loss"] if isinstance(out, dict) else out
            self.pacer.loss = loss.detach()
            return out

        def on_train_batch_start(batch, batch_idx):
            return -1 if self.pacer.stopping else start(batch, batch_idx)  # -1: Lightning ends the epoch

        module.training_step, module.on_train_batch_start = training_step, on_train_batch_start
        return module

    def setup(self, model, make_optimizer):
        self.pacer = _Pacer(self.ctx.device)
        self.model = model  # the unwrapped model: its parameter names are the reference's
        self.module = self._module(model, make_optimizer)
        self.trainer = self._trainer(self.pacer)
        loader = torch.utils.data.DataLoader(_Slots(), batch_size=None)
        self.pacer.start(lambda: self.trainer.fit(self.module, train_dataloaders=loader))
        self.optimizer = self.trainer.optimizers[0]  # Lightning's optimizer is the raw one: its state is ours
        self._pending = False

    def forward_backward(self, inputs, targets, loss_fn):
        if self._pending:  # the harness skipped the last update (an injected fault): the Trainer finishes it
            self.optimizer_step()
        _, loss = self.pacer.expect("backward", ("batch", inputs, targets))
        self._pending = True
        return loss

    def optimizer_step(self) -> None:
        self.pacer.expect("ready", ("go",))
        self._pending = False

    def extra_results(self) -> dict[str, Any]:
        # the Trainer-side clock of the measured steps (the harness's warm-up rule: train.py's ``unmeasured``)
        first = max(self.spec.run.warmup, 1 if self.spec.grad_check else 0)
        return {"trainer_step_times_s": self.pacer.step_times_s[first : first + self.spec.run.steps]}

    def teardown(self) -> None:
        if self._pending:
            self.optimizer_step()
        self.pacer.glet.switch(("stop",))  # the module's on_train_batch_start returns -1: fit returns
        assert self.pacer.glet.dead, "the Lightning Trainer's loop did not end at the harness's stop"


class LightningDDP(LightningTrainerStrategy):
    name = "lightning-ddp"
    trainer_strategy = "ddp"
    wire_factor = 2.0  # Lightning's DDPStrategy wraps the module in DistributedDataParallel: a ring all-reduce


class LightningFSDP(SummonedFsdp, LightningTrainerStrategy):
    name = "lightning-fsdp"
    trainer_strategy = "fsdp"

    def _fsdp_root(self):
        return self.trainer.strategy.model  # FullyShardedDataParallel around the module (use_orig_params=True)


class LightningDeepSpeed(GatheredDeepSpeed, LightningTrainerStrategy):
    name = "lightning-deepspeed"
    trainer_strategy = "deepspeed"  # Lightning's default: ZeRO stage 2

    def _lightning_strategy(self):
        """Lightning's DeepSpeedStrategy with the micro-batch given: left to "auto" it reads it off the loader's
        ``batch_sampler``, which the harness's loader of whole batches (batch_size=None) has not, and ``fit`` died
        with AttributeError (the first H100 run, docs/gpu). DeepSpeed uses the number for its throughput logs."""
        if self.ctx.device.type != "cuda":
            return self.trainer_strategy  # Lightning refuses CPU with its own message (the skip reason quotes it)
        from lightning.pytorch.strategies import DeepSpeedStrategy

        return DeepSpeedStrategy(stage=2, logging_batch_size_per_gpu=self.spec.local_batch)

    def state_bytes(self) -> dict[str, int]:
        # Lightning's DeepSpeedStrategy hands the Trainer the engine's ZeRO optimizer (``trainer.optimizers``):
        # its flat partitions live outside param.grad, as for deepspeed-zero*. Runs on CUDA only (passed on an H100: docs/gpu)
        from scalegate.measure.state_bytes import deepspeed_state_bytes

        return deepspeed_state_bytes(self.model, self.optimizer)
