"""A torchtitan-style trainer: one topology object, one function that applies FSDP2, torchtitan's log line.

    torchrun --nproc-per-node 2 titan_loop.py --dp-shard -1              # FSDP2 over every rank
    python titan_loop.py                                                  # one process, no sharding

The shape of torchtitan's ``train.py`` cut to one file: ``ParallelDims`` validates itself when built, a
``parallelize`` function applies ``fully_shard`` (``torch.distributed.fsdp``) to each transformer block and then
the root, an ``OptimizersContainer`` steps one AdamW per model part, the gradient norm is clipped over the sharded
gradients, and rank 0 logs a coloured line per step through torchtitan's logger format:
``[titan] 2026-11-25 14:52:41,000 - root - INFO - step:  3  loss:  4.1210  grad_norm:  1.2345  tps: 12,345``.
"""

import argparse
import logging
import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

logger = logging.getLogger()
VOCAB, SEQ = 128, 64
RED, GREEN, ORANGE, BLUE, RESET = "\033[31m", "\033[32m", "\033[38;2;255;165;0m", "\033[34m", "\033[39m"


def init_logger() -> None:
    logger.setLevel(logging.INFO)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[titan] %(asctime)s - %(name)s - %(levelname)s - %(message)s"))
    logger.addHandler(handler)


@dataclass(frozen=True)
class ParallelDims:
    dp_shard: int
    world_size: int

    def __post_init__(self) -> None:
        dp_shard = self.world_size if self.dp_shard == -1 else self.dp_shard
        if dp_shard != self.world_size:
            raise ValueError(f"dp_shard({dp_shard}) != WORLD_SIZE({self.world_size})")
        object.__setattr__(self, "dp_shard", dp_shard)

    def build_mesh(self, device_type: str):
        return init_device_mesh(device_type, (self.dp_shard,), mesh_dim_names=("dp_shard",))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attention_norm, self.ffn_norm = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.attention = nn.MultiheadAttention(dim, heads, bias=False, batch_first=True)
        self.feed_forward = nn.Sequential(nn.Linear(dim, 4 * dim, bias=False), nn.SiLU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.attention_norm(x)
        x = x + self.attention(h, h, h, attn_mask=mask, need_weights=False, is_causal=True)[0]
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, dim: int = 64, n_layers: int = 2, n_heads: int = 4) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, dim)
        self.layers = nn.ModuleDict({str(i): Block(dim, n_heads) for i in range(n_layers)})
        self.norm, self.output = nn.RMSNorm(dim), nn.Linear(dim, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1])
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, mask)
        return self.output(self.norm(h))


def parallelize(model: Transformer, mesh) -> Transformer:
    """torchtitan's apply_fsdp: each block its own unit (resharded after forward but the last), then the root."""
    for i, block in enumerate(model.layers.values()):
        fully_shard(block, mesh=mesh, reshard_after_forward=i < len(model.layers) - 1)
    fully_shard(model, mesh=mesh)
    return model


class OptimizersContainer:
    """One optimizer per model part, stepped together (torchtitan's components/optimizer.py)."""

    def __init__(self, parts: list[nn.Module], lr: float) -> None:
        self.optimizers = [torch.optim.AdamW(p.parameters(), lr=lr, weight_decay=0.1, fused=False) for p in parts]

    def step(self) -> None:
        for optimizer in self.optimizers:
            optimizer.step()

    def zero_grad(self) -> None:
        for optimizer in self.optimizers:
            optimizer.zero_grad()


def batches(rank: int, local_batch_size: int):
    """Each rank's own stream of sequences walking a fixed permutation of the vocabulary: learnable, deterministic."""
    perm = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(0))
    step = 0
    while True:
        g = torch.Generator().manual_seed(step * 1_009 + rank)
        starts = torch.randint(0, VOCAB, (local_batch_size, 1), generator=g)
        seq = perm[(starts + torch.arange(SEQ + 1)) % VOCAB]
        yield seq[:, :-1], seq[:, 1:]
        step += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dp-shard", type=int, default=-1, help="FSDP degree (-1: every rank)")
    parser.add_argument("--local-batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--max-norm", type=float, default=1.0)
    args = parser.parse_args()
    init_logger()

    world_size = int(os.environ.get("WORLD_SIZE", 1))
    device_type = "cuda" if torch.cuda.is_available() else "cpu"
    if world_size > 1:
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    rank = dist.get_rank() if world_size > 1 else 0
    torch.manual_seed(0)
    model = Transformer()
    if world_size > 1:
        model = parallelize(model, ParallelDims(dp_shard=args.dp_shard, world_size=world_size).build_mesh(device_type))
    optimizers = OptimizersContainer([model], args.lr)
    data = batches(rank, args.local_batch_size)

    time_last_log = time.perf_counter()
    for step in range(1, args.steps + 1):
        inputs, labels = next(data)
        optimizers.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs).flatten(0, 1), labels.flatten())
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm, foreach=True)
        if isinstance(grad_norm, torch.distributed.tensor.DTensor):
            grad_norm = grad_norm.full_tensor()
        optimizers.step()

        global_avg_loss = loss.detach()
        if world_size > 1:
            dist.all_reduce(global_avg_loss, op=dist.ReduceOp.AVG)
        tps = args.local_batch_size * SEQ / (time.perf_counter() - time_last_log)
        time_last_log = time.perf_counter()
        if rank == 0:
            logger.info(
                f"{RED}step: {step:2}  {GREEN}loss: {global_avg_loss.item():7.4f}  "
                f"{ORANGE}grad_norm: {grad_norm.item():7.4f}  {BLUE}tps: {round(tps):,}{RESET}"
            )
    if world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
