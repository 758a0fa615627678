"""When each rank reaches the end of its forward: the compute a straggler adds before anyone waits (worker side).

A collective makes every rank wait for the last one to arrive, so a slow rank's time spreads to all ranks' step
times and DDP's all-reduce evens out their backward times. The forward of data-parallel strategies has no
collective: the time from the step's start to the loss is each rank's own compute before its first wait. The
training loop hands strategies ``wrap(loss)`` instead of the workload's loss; the clock reads ``perf_counter`` as
the loss is called (~1 µs a step). ``harness/scalegate/figures/stragglers.py`` (launching side) names the rank that arrives last.
The injected straggler fault (``Faults.straggler_rank``/``straggler_ms``) sleeps here, inside the forward.
"""

from __future__ import annotations

import time
from typing import Callable


class ForwardClock:
    def __init__(self, rank: int, straggler_rank: int = -1, straggler_ms: int = 0) -> None:
        self.sleep_s = straggler_ms / 1000 if rank == straggler_rank else 0.0
        self.times: list[float] = []  # measured steps only: seconds from the step's start to its loss
        self._start = self._mark = None

    def start(self, t0: float) -> None:
        self._start, self._mark = t0, None

    def wrap(self, loss_fn: Callable, faulted: bool = True) -> Callable:
        def timed(output, target):
            if faulted and self.sleep_s:
                time.sleep(self.sleep_s)
            if self._mark is None:  # the first loss of the step (a pipeline's last stage computes several)
                self._mark = time.perf_counter()
            return loss_fn(output, target)

        return timed

    def keep(self, measured: bool) -> None:
        """After the step: record its forward time if it was a measured step and computed a loss here."""
        if measured and self._mark is not None and self._start is not None:
            self.times.append(self._mark - self._start)
        self._start = self._mark = None
