"""A DeepSpeed training loop on its engine, as DeepSpeed's getting-started guide and examples write one.

    deepspeed --num_gpus 2 deepspeed_engine.py --deepspeed_config ds_config_zero2.json
    torchrun --nproc-per-node 2 deepspeed_engine.py --deepspeed_config ds_config_zero3.json

``deepspeed.initialize`` builds the engine from the model and the JSON config (ZeRO stage, micro-batch, gradient
accumulation, its own AdamW); each micro-batch runs ``engine(inputs)``, ``engine.backward(loss)`` and
``engine.step()``, which steps the optimizer only at an accumulation boundary (ds_config_zero2.json accumulates 2
micro-batches). A line per optimizer step from rank 0, as DeepSpeed's CIFAR example prints its running loss:
``[step     3] loss: 2.291``.
"""

import argparse

import deepspeed
import torch
import torch.distributed as dist
from torch import nn


def dataset(size: int, dim: int, classes: int = 10) -> torch.utils.data.TensorDataset:
    """A learnable task, the same on every rank: the class is which of ``classes`` fixed centres a sample is near."""
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(classes, dim, generator=g)
    labels = torch.randint(0, classes, (size,), generator=g)
    return torch.utils.data.TensorDataset(centres[labels] + 0.7 * torch.randn(size, dim, generator=g), labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps")
    parser = deepspeed.add_config_arguments(parser)  # --deepspeed, --deepspeed_config
    args = parser.parse_args()

    deepspeed.init_distributed()  # gloo on CPU, nccl on GPUs; the ranks from torchrun's (or deepspeed's) environment
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    engine, _, loader, _ = deepspeed.initialize(
        args=args, model=model, model_parameters=model.parameters(), training_data=dataset(65536, 256)
    )

    data = iter(loader)  # a DistributedSampler: each rank its shard
    while engine.global_steps < args.steps:
        inputs, labels = (t.to(engine.device) for t in next(data))
        loss = nn.functional.cross_entropy(engine(inputs), labels)
        engine.backward(loss)
        boundary = engine.is_gradient_accumulation_boundary()
        engine.step()
        if boundary and dist.get_rank() == 0:
            print(f"[step {engine.global_steps - 1:5d}] loss: {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
