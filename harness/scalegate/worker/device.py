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
    if spec.run.dtype == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@contextlib.contextmanager
def deterministic_kernels(device: torch.device):
    """cuDNN's deterministic algorithms in full fp32 (no TF32, no autotuning) while the single-process reference
    steps beside the strategy; the measured steps keep the defaults.

    Deterministic: measured on an H100 (docs/gpu), with the defaults a conv's weight gradient came out 1.7e-7 apart
    between the strategy and its reference on the same batch, and AdamW turned that into parameters 5e-3 (cnn) to
    0.12 (resnet) apart after 3 steps, failing ``single`` against itself.
    No TF32 (``cudnn.allow_tf32`` is on by default): it rounds a conv's inputs to 10 mantissa bits, which cancels
    out only while both sides feed the same kernels the same inputs. A compiled block's fused kernels do not: on an
    H200 the compiled resnet's gradients came out up to 6.7% apart from the eager reference (a 1x1 shortcut conv
    followed by BatchNorm), while the cnn's were 5.6e-5 (docs/gpu/nvidia-h200-2026-11-25.md).
    On CPU this does nothing: its kernels are deterministic and fp32 already."""
    if device.type != "cuda":
        yield
        return
    cudnn = torch.backends.cudnn
    before = cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32
    cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32 = True, False, False
    try:
        yield
    finally:
        cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32 = before
