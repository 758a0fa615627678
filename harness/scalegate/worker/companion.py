"""A second strategy trained in the same launch as the case's own, step by step (parity). Worker side.

Parity (harness/scalegate/parity.py) holds a candidate front end to a baseline: ``fabric-ddp`` must train what
``ddp`` trains, as fast. Measured as two launches on a shared machine, the two throughputs differed by
10-35% from noise alone. So a parity launch trains both: every rank builds the companion's model from
the same seed as the strategy's, and in every step (warm-up and measured) runs the strategy's step and
the companion's back to back, each between device syncs, the order alternating (even steps: the
strategy first; odd steps: the companion first) so neither always runs on the cache the other warmed.
A slow phase of the host then reaches both halves of a step, and their ratio keeps what the front end
costs. This is how Lightning's own parity benchmark compares its front ends.

Injected faults and the gradient check belong to the strategy (the candidate) only: the companion is
the clean baseline. Peak memory and bytes on the wire of such a launch hold both models; parity judges
neither (only losses and step times).
"""

from __future__ import annotations

from typing import Callable

import torch

from scalegate import strategies

# (strategy, step, inject faults?) -> (seconds, loss): harness/scalegate/worker/loop.py's timed step
StepFn = Callable[[strategies.Strategy, int, bool], tuple[float, float]]


class Companion:
    """The companion strategy on this rank, with its own model, optimizer and record of steps."""

    def __init__(self, spec, ctx, workload, make_optimizer, run_step: StepFn) -> None:
        torch.manual_seed(spec.run.seed)  # the same initial weights as the strategy's model
        model = workload.build_model()
        self.strategy = strategies.get(spec.companion)(ctx, spec, workload=workload)
        self.strategy.setup(model, make_optimizer)
        self.run_step = run_step
        self.step_times_s: list[float] = []  # measured steps only, as the strategy's own
        self.losses: list[float] = []
        self.warmup_losses: list[float] = []

    def interleave(self, step: int, main: Callable[[], tuple[float, float]], measured: bool) -> tuple[float, float]:
        """The strategy's step ``main()`` and the companion's, in this step's order; returns ``main()``'s result.

        The order depends on the step alone, so it is the same on every rank: both strategies' collectives go
        through the one default process group (Fabric attaches to the worker's), and must be issued in one order.
        """
        if step % 2 == 0:
            result = main()
            self._step(step, measured)
        else:
            self._step(step, measured)
            result = main()
        return result

    def _step(self, step: int, measured: bool) -> None:
        elapsed, loss = self.run_step(self.strategy, step, False)  # never faulted: it is the baseline
        if measured:
            self.step_times_s.append(elapsed)
            self.losses.append(loss)
        else:
            self.warmup_losses.append(loss)

    def result(self) -> dict[str, list[float]]:
        """The ``RankResult`` fields it fills."""
        return {
            "companion_step_times_s": self.step_times_s,
            "companion_losses": self.losses,
            "companion_warmup_losses": self.warmup_losses,
        }

    def teardown(self) -> None:
        self.strategy.teardown()


def build(spec, ctx, workload, make_optimizer, run_step: StepFn) -> Companion | None:
    """The spec's companion, set up beside the strategy, or None when the spec names none."""
    return Companion(spec, ctx, workload, make_optimizer, run_step) if spec.companion else None
