"""The measured window's instruments, for a workload's steps and a script's alike."""

from __future__ import annotations

import psutil
import torch

from scalegate.contract.spec import CaseSpec
from scalegate.measure.memory import MemorySampler
from scalegate.measure.wire import WireCounter
from scalegate.strategies.base import RankContext
from scalegate.worker import faults


class MeasuredWindow:
    """The measured window's instruments: bytes on the wire, peak memory, CPU time, and the injected ballast held
    through it. Opened just before the first measured step, closed right after the last one."""

    def __init__(self, spec: CaseSpec, ctx: RankContext) -> None:
        self.spec, self.ctx = spec, ctx
        self.process = psutil.Process()
        self.sampler = MemorySampler(ctx.device.type, ctx.device.index, interval_s=spec.memory_interval_ms / 1000)
        self.wire = WireCounter()
        self.ballast: torch.Tensor | None = None

    def open(self) -> None:
        self.wire.start()  # barrier-aligned counter reading: the window holds exactly the measured steps
        if self.ctx.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.ctx.device)
        self.cpu0 = self.process.cpu_times()
        self.sampler.__enter__()
        self.ballast = faults.inject_memory_fault(self.spec)

    def close(self) -> None:
        self.sampler.__exit__(None, None, None)
        self.ballast = None  # the sampler is done: free the injected ballast before the windows after the steps
        self.cpu1 = self.process.cpu_times()
        self.wire.stop()
