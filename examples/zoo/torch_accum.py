"""A plain torch loop with gradient accumulation, nanoGPT's way (its train.py, cut to a small causal LM).

    python torch_accum.py                                          # one process, 8 micro-batches a step
    torchrun --nproc-per-node 2 torch_accum.py                     # DDP: each rank 8 / 2 of them

As in nanoGPT the global batch stays the same on any number of ranks: ``gradient_accumulation_steps`` is divided
by the world size, and DDP syncs gradients only on the last micro-step (``require_backward_grad_sync``). Unlike
nanoGPT's random crops, micro-batch k of step s is the same samples whichever rank runs it, so 1 and N ranks train
the same model up to the order of sums, and the loss printed is the step's first micro-batch's (nanoGPT prints its
last, which is another micro-batch on each world size). A line per iteration from the master process:
``iter 3: loss 4.1210, time 31.02ms``.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

VOCAB, BLOCK = 64, 32


class TinyLM(nn.Module):
    """A two-layer causal transformer: embeddings, pre-norm encoder layers with a causal mask, a tied head."""

    def __init__(self, n_embd: int = 64, n_layer: int = 2, n_head: int = 4) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, n_embd), nn.Embedding(BLOCK, n_embd)
        layer = nn.TransformerEncoderLayer(n_embd, n_head, 4 * n_embd, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight
        for emb in (self.wte, self.wpe):  # nanoGPT's init: small embeddings, so the first logits are near uniform
            nn.init.normal_(emb.weight, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t = idx.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        x = self.blocks(self.wte(idx) + self.wpe(torch.arange(t)), mask=mask, is_causal=True)
        logits = self.lm_head(self.ln_f(x))
        return logits, nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def get_batch(step: int, micro: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Global micro-batch ``micro`` of ``step``: each sequence walks a fixed permutation of the vocabulary."""
    perm = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(1337))
    g = torch.Generator().manual_seed(step * 10_007 + micro)
    starts = torch.randint(0, VOCAB, (batch_size, 1), generator=g)
    seq = perm[(starts + torch.arange(BLOCK + 1)) % VOCAB]
    return seq[:, :-1], seq[:, 1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-iters", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per micro-batch")
    parser.add_argument("--gradient-accumulation-steps", type=int, default=8, help="micro-batches a step, all ranks")
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    args = parser.parse_args()

    ddp = int(os.environ.get("RANK", -1)) != -1  # is this a ddp run?
    if ddp:
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        ddp_rank, ddp_world_size = dist.get_rank(), dist.get_world_size()
        assert args.gradient_accumulation_steps % ddp_world_size == 0
        gradient_accumulation_steps = args.gradient_accumulation_steps // ddp_world_size
    else:
        ddp_rank, ddp_world_size, gradient_accumulation_steps = 0, 1, args.gradient_accumulation_steps
    master_process = ddp_rank == 0
    torch.manual_seed(1337)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    if ddp:
        model = DDP(model)

    t0 = time.time()
    for iter_num in range(args.max_iters):
        for micro_step in range(gradient_accumulation_steps):
            if ddp:  # sync gradients only on the last micro-step, as nanoGPT does
                model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
            x, y = get_batch(iter_num, ddp_rank * gradient_accumulation_steps + micro_step, args.batch_size)
            _, loss = model(x, y)
            if micro_step == 0:  # global micro-batch 0 on any number of ranks: 1 and N ranks print the same curve
                lossf = loss.item()
            loss = loss / gradient_accumulation_steps
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if master_process:
            print(f"iter {iter_num}: loss {lossf:.4f}, time {dt * 1000:.2f}ms")
    if ddp:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
