"""FLOPs of one training step, counted by torch on the single-process model (worker side).

The reference (``harness/scalegate/worker/loop.py``'s ``Reference``) runs one forward and backward of the unwrapped model on
the whole global batch in the first, untimed step, for the gradient check. Rank 0 runs that step under
``torch.utils.flop_counter.FlopCounterMode``, which adds the FLOPs of every matmul, convolution and attention
op from their shapes: deterministic, the same on any device, and right for models a ``6N`` formula gets wrong
(convolutions, recurrent cells, attention over long sequences). Elementwise ops and the optimizer are not
counted: the convention MFU is quoted in (PaLM, torchtitan). torch has no formula for the fused recurrent
layer CPU runs an ``nn.LSTM``/``nn.GRU`` with (``aten.mkldnn_rnn_layer``): ``RNN_FORMULAS`` adds it, so
``rnn_mnist`` is counted too. The launching side turns the count into achieved FLOP/s and MFU against the
device's peak (``harness/scalegate/figures/peaks.py``).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator


def _rnn_layer(input_shape, w_ih_shape, w_hh_shape, *args, out_shape=None, **kwargs) -> int:
    """One fused recurrent layer over the sequence: per time step, gates = x W_ih^T + h W_hh^T."""
    steps, batch, features = input_shape
    gates, hidden = w_ih_shape[0], w_hh_shape[1]
    return 2 * steps * batch * gates * (features + hidden)


def _rnn_layer_backward(input_shape, w_ih_shape, w_hh_shape, *args, out_shape=None, **kwargs) -> int:
    """Input, hidden and both weight gradients: twice the forward's matmuls."""
    return 2 * _rnn_layer(input_shape, w_ih_shape, w_hh_shape)


def rnn_formulas() -> dict[Any, Any]:
    import torch

    ops = torch.ops.aten
    found = {}
    if hasattr(ops, "mkldnn_rnn_layer"):
        found[ops.mkldnn_rnn_layer] = _rnn_layer
    if hasattr(ops, "mkldnn_rnn_layer_backward"):
        found[ops.mkldnn_rnn_layer_backward] = _rnn_layer_backward
    return found


class StepFlops:
    """``with counter.counting(): ...`` counts what runs inside, once; ``result()`` for the rank's JSON."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.total: int | None = None
        self.by_op: dict[str, int] = {}
        self.unavailable = "" if enabled else "counted on rank 0 only"

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        if not self.enabled or self.total is not None:
            yield
            return
        from torch.utils.flop_counter import FlopCounterMode

        mode = FlopCounterMode(display=False, custom_mapping=rnn_formulas())
        with mode:
            yield
        self.total = int(mode.get_total_flops())
        self.by_op = {
            str(op).split(".")[-1] if "." in str(op) else str(op): int(n)
            for op, n in mode.get_flop_counts().get("Global", {}).items()
        }
        if self.total <= 0:
            self.unavailable = "FlopCounterMode counted no matmul, convolution or attention op in the step"

    def result(self) -> dict[str, Any]:
        """``flops_per_step``: one forward and backward of the whole global batch; None where not counted."""
        counted = self.total if self.total else None
        return {
            "flops_per_step": counted,
            "flops_by_op": self.by_op,
            "flops_unavailable": "" if counted else self.unavailable or "not counted",
        }
