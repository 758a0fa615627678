"""Worker side of gradient agreement: errors of a strategy's full tensors against a single process.

The tolerance is applied on the launching side (``scalegate.checks.agreement``); here we only measure, per
parameter, the max absolute error and that error relative to the reference tensor's max magnitude. Elements
whose true gradient is 0 (``CaseSpec.zero_grad``, found by the pytest side's probe: fixtures/probe.py) are left
out: their float32 values are rounding noise, different in any two reduction orders, and AdamW's steps on that
noise are about lr either way.
"""

from __future__ import annotations

from typing import Any

import torch

TINY = 1e-12


def compare(
    actual: dict[str, torch.Tensor], reference: dict[str, torch.Tensor], zero_grad: dict[str, Any] | None = None
) -> dict:
    """Per-parameter errors over the compared elements, the worst parameter by relative error, and the elements
    left out (``not_compared``: name -> count)."""
    skip = (zero_grad or {}).get("params") or {}
    missing = sorted(set(reference) - set(actual))
    extra = sorted(set(actual) - set(reference))
    errors: dict[str, dict[str, float]] = {}
    left_out: dict[str, int] = {}
    for name, ref in reference.items():
        if name not in actual:
            continue
        got = actual[name].detach().to("cpu", torch.float64).reshape(-1)
        want = ref.detach().to("cpu", torch.float64).reshape(-1)
        if name in skip and skip[name]["numel"] == want.numel():
            keep = _keep(want.numel(), skip[name]["ranges"])
            left_out[name] = int((~keep).sum())
            got, want = got[keep], want[keep]
            if not want.numel():
                continue
        abs_err = float((got - want).abs().max()) if want.numel() else 0.0
        scale = float(want.abs().max()) if want.numel() else 0.0
        errors[name] = {"abs": abs_err, "rel": abs_err / max(scale, TINY), "scale": scale}
    worst = max(errors, key=lambda n: errors[n]["rel"], default=None)
    return {"errors": errors, "worst": worst, "missing": missing, "extra": extra, "not_compared": left_out}


def _keep(numel: int, ranges: list[list[int]]) -> torch.Tensor:
    """True on the elements compared; False on ``ranges``, the flat ``[start, stop)`` runs left out."""
    keep = torch.ones(numel, dtype=torch.bool)
    for start, stop in ranges:
        keep[start:stop] = False
    return keep
