"""One marker per training stack, each gating a script written the way that stack's docs write one (docs/your-script.md:
Recipes). Every script runs unchanged; the marker names its own strategy words, the argument that sets its batch,
its step count as ``{steps}`` (the steps each case needs), and a loss_pattern for the lines that stack prints.

pytest                                        # every stack, each strategy with its 1x1 run
pytest -k hf_trainer                          # one stack
pytest -k "deepspeed and zero3" --scaling-steps 20
"""

import pytest
import torch

# The Hugging Face Trainer: DDP under torchrun, DeepSpeed ZeRO-2/3 from TrainingArguments(deepspeed=...). Its log
# dict quotes its values: {'loss': '3.441', 'grad_norm': '1.866', 'learning_rate': '0.0001667', 'epoch': '0.02'}.
HF_TRAINER = dict(
    name="hf_trainer",
    topologies=["1x2"],
    batch=8,  # per_device_train_batch_size x gradient_accumulation_steps: samples per rank per optimizer step
    loss_pattern=r"'loss': '?([0-9.eE+-]+)'?",
)


@pytest.mark.scaling_script(
    "hf_trainer.py",
    "--strategy={strategy}",
    "--max-steps={steps}",
    "--per-device-train-batch-size=8",
    strategies=["ddp", "zero2", "zero3"],
    canary=True,
    **HF_TRAINER,
)
def test_hf_trainer(scaling_case, benchmark):
    scaling_case.check(benchmark)


@pytest.mark.scaling_script(
    "hf_trainer.py", "--strategy={strategy}", "--max-steps={steps}", "--per-device-train-batch-size=8",
    strategies=["fsdp"], **HF_TRAINER,
)  # fmt: skip
def test_hf_trainer_fsdp(scaling_case, benchmark):
    if not torch.cuda.is_available():
        # Not a refusal: accelerate (1.15) keeps the Trainer's FSDP plugin only for accelerator devices (its
        # AcceleratorState), so on a CPU-only machine fsdp=True trains as DDP without a word
        pytest.skip(
            "the HF Trainer's fsdp=True runs as DDP on CPU (accelerate enables FSDP for accelerator devices only): "
            "FSDP through the Trainer needs a GPU; torch's own fully_shard runs on CPU (titan_loop.py)"
        )
    scaling_case.check(benchmark)


# Accelerate: Accelerator().prepare, accelerator.backward; with accumulation, an optimizer step every 4 batches.
# Its logger prefixes the rank: "11/25/2026 14:54:46 - INFO - __main__ - [RANK 0] step 3: loss 1.1396".
ACCELERATE = dict(strategies=["ddp"], topologies=["1x2"], loss_pattern=r"step (\d+): loss ([0-9.eE+-]+)")


@pytest.mark.scaling_script(
    "accelerate_loop.py", "--max-train-steps={steps}", "--per-device-train-batch-size=32",
    name="accelerate", batch=32, **ACCELERATE,
)  # fmt: skip
def test_accelerate(scaling_case, benchmark):
    scaling_case.check(benchmark)


@pytest.mark.scaling_script(
    "accelerate_loop.py", "--max-train-steps={steps}", "--per-device-train-batch-size=32",
    "--gradient-accumulation-steps=4",
    name="accelerate_accum", batch=128, **ACCELERATE,  # 32 x 4 samples per rank per optimizer step
)  # fmt: skip
def test_accelerate_accumulating(scaling_case, benchmark):
    scaling_case.check(benchmark)


# Lightning: Trainer.fit, the ranks from torchrun's environment (devices and nodes must match the launch)
@pytest.mark.scaling_script(
    "lightning_fit.py", "--strategy={strategy}", "--devices={nproc_per_node}", "--num-nodes={nnodes}",
    "--max-steps={steps}", "--batch-size=32",
    name="lightning", strategies=["ddp", "fsdp"], topologies=["1x2"], batch=32,
    loss_pattern=r"step (\d+) train_loss ([0-9.eE+-]+)",
)  # fmt: skip
def test_lightning(scaling_case, benchmark):
    _skip_where_lightning_refuses(scaling_case)
    scaling_case.check(benchmark)


def _skip_where_lightning_refuses(scaling_case) -> None:
    """Lightning's own refusal of a strategy on this machine (fsdp and deepspeed need a GPU) as the skip's reason."""
    strategy, devices = scaling_case.case.spec.strategy, scaling_case.case.spec.world_size
    if strategy == "ddp":
        return
    import lightning as L

    try:
        L.Trainer(accelerator="auto", strategy=strategy, devices=devices, logger=False)
    except (ValueError, RuntimeError) as refused:
        pytest.skip(f"Lightning refuses {strategy} here: {refused}")


# DeepSpeed's engine: deepspeed.initialize, engine.backward, engine.step; the ZeRO stage from its JSON config
# (ds_config_zero2.json accumulates 2 micro-batches of 16 a step)
@pytest.mark.scaling_script(
    "deepspeed_engine.py", "--deepspeed_config=ds_config_{strategy}.json", "--steps={steps}",
    name="deepspeed", strategies=["zero2", "zero3"], topologies=["1x2"], batch=32,
    loss_pattern=r"\[step\s+(\d+)\] loss: ([0-9.eE+-]+)",
)  # fmt: skip
def test_deepspeed(scaling_case, benchmark):
    scaling_case.check(benchmark)


# A plain torch loop with gradient accumulation, nanoGPT's way: the global batch (8 micro-batches of 8) stays the same
# on any number of ranks, so it is strong scaling and the loss curve must track the 1x1 run's
@pytest.mark.scaling_script(
    "torch_accum.py", "--max-iters={steps}",
    name="nanogpt_accum", strategies=["ddp"], topologies=["1x2"], scaling="strong", batch=64,
    loss_pattern=r"iter (\d+): loss ([0-9.eE+-]+)",
)  # fmt: skip
def test_torch_accumulating(scaling_case, benchmark):
    scaling_case.check(benchmark)


# torchtitan-style: FSDP2 fully_shard per block, its coloured log line (ANSI colour codes between the fields)
@pytest.mark.scaling_script(
    "titan_loop.py", "--dp-shard=-1", "--steps={steps}", "--local-batch-size=8",
    name="titan", strategies=["fsdp"], topologies=["1x2"], batch=8,
    loss_pattern=r"step:\s*(\d+)\s+(?:\x1b\[[0-9;]*m)?loss:\s*([0-9.eE+-]+)",
)  # fmt: skip
def test_titan(scaling_case, benchmark):
    scaling_case.check(benchmark)
