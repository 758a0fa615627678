"""Device helpers every part of a rank shares: the sync that brackets a timed step, mixed precision, and the
deterministic kernels of the steps the single-process reference checks."""

from __future__ import annotations

import contextlib

import torch

from scalegate.contract.spec import CaseSpec


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def autocast(spec: CaseSpec, device: torch.device):
    if spec.dtype == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@contextlib.contextmanager
def deterministic_kernels(device: torch.device):
    """cuDNN's deterministic algorithms (and no autotuning) while the single-process reference steps beside the
    strategy; the measured steps keep the defaults. Measured on an H100 (docs/gpu): with the defaults, a conv's
    weight gradient came out 1.7e-7 apart between the strategy and its reference on the same batch, and AdamW
    turned that into parameters 5e-3 (cnn) to 0.12 (resnet) apart after 3 steps, failing ``single`` against
    itself. On CPU this does nothing: its kernels are deterministic already."""
    if device.type != "cuda":
        yield
        return
    cudnn = torch.backends.cudnn
    before = cudnn.deterministic, cudnn.benchmark
    cudnn.deterministic, cudnn.benchmark = True, False
    try:
        yield
    finally:
        cudnn.deterministic, cudnn.benchmark = before
