"""A training script written the way teams write them; it imports nothing from scalegate.

    python train.py --max-steps 50                                   # one process
    torchrun --nproc-per-node 2 train.py --strategy ddp              # two ranks, DDP
    torchrun --nproc-per-node 2 train.py --strategy fsdp             # two ranks, FSDP2

Distributed mode comes from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK), so one script runs on 1 or N
processes (nanoGPT's way). Each rank trains on its own slice of a deterministic synthetic task, so every world
size sees the same data per rank (weak scaling); a line per step says the loss.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn


def batches(rank: int, batch: int, dim: int, seed: int = 0):
    """A learnable task: the class is which of 10 fixed directions a noisy sample lies closest to."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(10, dim, generator=g)
    step = 0
    while True:
        g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + rank)
        labels = torch.randint(0, 10, (batch,), generator=g)
        yield centres[labels] + 0.5 * torch.randn(batch, dim, generator=g), labels
        step += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", choices=["ddp", "fsdp"], default="ddp")
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()

    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank() if distributed else 0
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(args.dim, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    model = model.to(device)
    if distributed and args.strategy == "ddp":
        model = nn.parallel.DistributedDataParallel(model)
    elif distributed and args.strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    data = batches(rank, args.batch, args.dim)
    for step in range(args.max_steps):
        inputs, labels = (t.to(device) for t in next(data))
        loss = loss_fn(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
