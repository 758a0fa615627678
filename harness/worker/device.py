"""Device helpers every part of a rank shares: the sync that brackets a timed step, and mixed precision."""

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
