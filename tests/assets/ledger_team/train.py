"""A team's training script, as the four code changes of docs/memory-and-wire.md#four-changes-it-names meet it.

    torchrun --nproc-per-node 2 train.py --strategy ddp     # DDP, 4 micro-batches a step, gradients synced once
    torchrun --nproc-per-node 2 train.py --strategy fsdp    # FSDP2, parameters kept gathered after the forward

It imports nothing from scalegate. DDP accumulates 4 micro-batches a step under ``no_sync()`` and averages the
gradients in buckets of 25 MB (DDP's default, written out); FSDP2 keeps each layer's parameters gathered from the
forward to the backward (``reshard_after_forward=False``). The tests commit one change at a time on top of it.
"""

import argparse
import contextlib
import os

import torch
import torch.distributed as dist
from torch import nn

ACCUMULATE = 4


def batches(rank: int, batch: int, dim: int):
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(10, dim, generator=g)
    step = 0
    while True:
        g = torch.Generator().manual_seed(step * 1_009 + rank)
        labels = torch.randint(0, 10, (batch,), generator=g)
        yield centres[labels] + 0.5 * torch.randn(batch, dim, generator=g), labels
        step += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", choices=["ddp", "fsdp"], default="ddp")
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=16, help="samples per rank per micro-batch")
    parser.add_argument("--dim", type=int, default=128)
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
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
    elif distributed and args.strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, reshard_after_forward=False)
        fully_shard(model, reshard_after_forward=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    data = batches(rank, args.batch, args.dim)
    for step in range(args.max_steps):
        for micro in range(ACCUMULATE):
            inputs, labels = (t.to(device) for t in next(data))
            last = micro == ACCUMULATE - 1
            sync = model.no_sync() if distributed and args.strategy == "ddp" and not last else contextlib.nullcontext()
            with sync:
                loss = loss_fn(model(inputs), labels) / ACCUMULATE
                loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if rank == 0:
            print(f"step {step} loss {loss.item() * ACCUMULATE:.4f}", flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
