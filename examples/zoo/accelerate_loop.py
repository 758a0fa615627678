"""A training loop with Hugging Face Accelerate, as its docs and the ``*_no_trainer`` examples write one.

    python accelerate_loop.py                                                  # one process
    torchrun --nproc-per-node 2 accelerate_loop.py                             # DDP (Accelerate picks it)
    torchrun --nproc-per-node 2 accelerate_loop.py --gradient-accumulation-steps 4

``Accelerator().prepare`` wraps the model (DDP under torchrun), the optimizer (``AcceleratedOptimizer``) and the
data loader (each rank its shard); ``accelerator.backward`` runs the backward; with gradient accumulation,
``accelerator.accumulate`` skips the gradient sync and the optimizer's step on all but every N-th batch. A line
per optimizer step through Accelerate's logger, main process only:
``11/25/2026 14:52:41 - INFO - __main__ - step 3: loss 2.2914``.
"""

import argparse
import logging

import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from torch import nn

logger = get_logger(__name__)


def dataset(size: int, dim: int, classes: int = 10) -> torch.utils.data.TensorDataset:
    """A learnable task, the same on every rank: the class is which of ``classes`` fixed centres a sample is near."""
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(classes, dim, generator=g)
    labels = torch.randint(0, classes, (size,), generator=g)
    return torch.utils.data.TensorDataset(centres[labels] + 0.7 * torch.randn(size, dim, generator=g), labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-train-steps", type=int, default=40, help="optimizer steps")
    parser.add_argument("--per-device-train-batch-size", type=int, default=32)
    parser.add_argument("--gradient-accumulation-steps", type=int, default=1)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    args = parser.parse_args()
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", datefmt="%m/%d/%Y %H:%M:%S", level=logging.INFO
    )

    # cpu=True where there is no GPU, as `accelerate launch --cpu` sets it: under torchrun on a CPU-only machine
    # Accelerate otherwise runs every process alone (DistributedType.NO), each training on all the data
    accelerator = Accelerator(
        cpu=not torch.cuda.is_available(), gradient_accumulation_steps=args.gradient_accumulation_steps
    )
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    loader = torch.utils.data.DataLoader(dataset(65536, 256), batch_size=args.per_device_train_batch_size, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    completed_steps = 0
    model.train()
    while completed_steps < args.max_train_steps:
        for inputs, labels in loader:
            with accelerator.accumulate(model):
                loss = nn.functional.cross_entropy(model(inputs), labels)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:  # an optimizer step, not a micro-batch
                logger.info(f"step {completed_steps}: loss {loss.item():.4f}")
                completed_steps += 1
                if completed_steps >= args.max_train_steps:
                    break
    accelerator.end_training()


if __name__ == "__main__":
    main()
