"""Worker side of gradient agreement: errors of a strategy's full tensors against a single process.

The tolerance is applied on the launching side (``scalegate.checks.agreement``); here we only measure, per
parameter, the max absolute error and that error relative to the reference tensor's max magnitude.
"""

from __future__ import annotations

import torch

TINY = 1e-12


def compare(actual: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> dict:
    """Per-parameter errors and the worst parameter by relative error."""
    missing = sorted(set(reference) - set(actual))
    extra = sorted(set(actual) - set(reference))
    errors: dict[str, dict[str, float]] = {}
    for name, ref in reference.items():
        if name not in actual:
            continue
        got = actual[name].detach().to("cpu", torch.float64).reshape(ref.shape)
        want = ref.detach().to("cpu", torch.float64)
        abs_err = float((got - want).abs().max()) if want.numel() else 0.0
        scale = float(want.abs().max()) if want.numel() else 0.0
        errors[name] = {"abs": abs_err, "rel": abs_err / max(scale, TINY), "scale": scale}
    worst = max(errors, key=lambda n: errors[n]["rel"], default=None)
    return {"errors": errors, "worst": worst, "missing": missing, "extra": extra}
