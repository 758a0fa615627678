"""Paired reference steps (``--scaling-paired``): the single-process step, timed inside the case's launch.

On shared VMs a whole machine runs fast or slow for seconds at a time (docs/detection.md: a single
process alternates between ~20 ms and ~26 ms steps within one launch), so a 1x1 reference launched
seconds before the case can meet another phase than the case did. Here rank 0 keeps an unwrapped copy
of the model and, right after every distributed step, runs one single-process step on the batch the
1x1 reference would take (the micro-batch under weak scaling, the whole global batch under strong),
while the other ranks wait at a barrier, idle, as the other cores are during a 1x1 launch. Step i of
the case and its reference then share the machine's phase, and efficiency is computed from the pairs.

The copy lives on rank 0's device for the measured window: rank 0's peak memory includes one more
model and optimizer state, which is why this is an option (memory baselines are recorded per mode).
"""

from __future__ import annotations

import copy
import time

import torch
import torch.distributed as dist

from harness.spec import CaseSpec, Faults


def reference_batch(spec: CaseSpec) -> int:
    """The global batch of the 1x1 single-process reference of ``spec`` (harness/session.py)."""
    return spec.replace(strategy="single", topology="1x1", faults=Faults()).global_batch_size


class PairedReference:
    def __init__(self, model: torch.nn.Module, spec: CaseSpec, rank: int, device: torch.device,
                 make_optimizer, loss_fn, autocast) -> None:
        self.batch = reference_batch(spec)
        self.device, self.loss_fn, self.autocast = device, loss_fn, autocast
        self.times: list[float] = []
        self.model = copy.deepcopy(model).to(device) if rank == 0 else None
        self.optimizer = make_optimizer(self.model.parameters()) if self.model is not None else None

    def step(self, inputs: torch.Tensor, targets: torch.Tensor, timed: bool) -> None:
        """Rank 0: one timed single-process step; everyone: a barrier, so no rank starts the next
        distributed step (or sends a byte) while the reference runs."""
        if self.model is not None:
            x, y = inputs[:self.batch].to(self.device), targets[:self.batch].to(self.device)
            _sync(self.device)
            t0 = time.perf_counter()
            self.optimizer.zero_grad(set_to_none=True)
            with self.autocast():
                loss = self.loss_fn(self.model(x), y)
            loss.backward()
            self.optimizer.step()
            _sync(self.device)
            if timed:
                self.times.append(time.perf_counter() - t0)
        if dist.is_initialized():
            dist.barrier()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
