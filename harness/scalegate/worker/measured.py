"""The measured window's instruments, for a workload's steps and a script's alike."""

from __future__ import annotations

import os
from typing import Any

import psutil
import torch

from scalegate.contract.spec import CaseSpec
from scalegate.measure.contention import CpuWait
from scalegate.measure.ledger import ENV_OFF, Ledger
from scalegate.measure.memory import MemorySampler
from scalegate.measure.wire import WireCounter
from scalegate.strategies.base import RankContext
from scalegate.worker import faults

ALLOCATOR = "cuda allocator (max_memory_allocated)"


class MeasuredWindow:
    """The measured window's instruments: the collective ledger, bytes on the wire, peak memory, CPU time and the
    wait for a core, and the injected ballast held through it. Opened just before the first measured step, closed
    right after the last one; ``step()`` ends each measured step for the ledger."""

    def __init__(self, spec: CaseSpec, ctx: RankContext) -> None:
        self.spec, self.ctx = spec, ctx
        self.process = psutil.Process()
        self.sampler = MemorySampler(ctx.device.type, ctx.device.index, interval_s=spec.run.memory_interval_ms / 1000)
        self.wire = WireCounter()
        off = os.environ.get(ENV_OFF) == "1"
        self.ledger = Ledger(enabled=not off, why_off=f"{ENV_OFF}=1" if off else "")
        self.cpu_wait = CpuWait()
        self.ballast: torch.Tensor | None = None
        self.allocator_peak: int | None = None  # CUDA: the caching allocator's peak over the window

    def open(self) -> None:
        self.wire.start()  # barrier-aligned counter reading: the window holds exactly the measured steps
        if self.ctx.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.ctx.device)
        self.cpu0 = self.process.cpu_times()
        self.sampler.__enter__()
        self.ballast = faults.inject_memory_fault(self.spec)
        self.cpu_wait.open()
        self.ledger.open()  # last: the window's own barriers and readings are no collective of the steps

    def step(self) -> None:
        self.ledger.step()

    def memory(self) -> dict[str, Any]:
        """The judged peak and its source: on CUDA the allocator's (``max_memory_allocated``, which repeats between
        launches), with NVML's reading of the whole process (its context, NCCL's buffers, the allocator's cache)
        beside it; elsewhere the sampler's (RSS)."""
        if self.allocator_peak is None:
            return {"peak_memory_bytes": self.sampler.peak_bytes, "memory_source": self.sampler.source}
        return {
            "peak_memory_bytes": self.allocator_peak,
            "memory_source": ALLOCATOR,
            "device_peak_bytes": self.sampler.peak_bytes,
            "device_peak_source": self.sampler.source,
        }

    def close(self) -> None:
        self.ledger.close()
        self.cpu_wait.close()
        if self.ctx.device.type == "cuda":  # read now: the windows after the steps (profiler, checkpoint) add theirs
            self.allocator_peak = int(torch.cuda.max_memory_allocated(self.ctx.device))
        self.sampler.__exit__(None, None, None)
        self.ballast = None  # the sampler is done: free the injected ballast before the windows after the steps
        self.cpu1 = self.process.cpu_times()
        self.wire.stop()
