"""A per-rank memory sampler thread: NVML on NVIDIA GPUs, the process's RSS elsewhere.

Only the samples taken while ``sampling`` is on count, so set-up and warm-up spikes are kept out of
the measured peak (the CUDA allocator's own peak is added on GPUs).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import psutil

DEFAULT_INTERVAL_S = 0.05


class MemorySampler:
    def __init__(self, device_type: str, device_index: int | None = None,
                 interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._process = psutil.Process(os.getpid())
        self._read, self.source = self._pick_source(device_type, device_index)
        self._thread = threading.Thread(target=self._run, name="scalegate-memory", daemon=True)

    def _pick_source(self, device_type: str, device_index: int | None):
        if device_type == "cuda":
            try:
                import pynvml

                pynvml.nvmlInit()
                handle = pynvml.nvmlDeviceGetHandleByIndex(device_index or 0)
                pid = os.getpid()

                def read_nvml() -> int:
                    for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                        if proc.pid == pid and proc.usedGpuMemory is not None:
                            return int(proc.usedGpuMemory)
                    return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)

                return read_nvml, "nvml"
            except Exception as exc:  # NVMLError_LibraryNotFound and friends: fall back, and say so
                return self._rss, f"rss (nvml unavailable: {type(exc).__name__})"
        return self._rss, "rss"

    def _rss(self) -> int:
        return int(self._process.memory_info().rss)

    def _run(self) -> None:
        start = time.perf_counter()
        while not self._stop.is_set():
            self.samples.append((time.perf_counter() - start, self._read()))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.samples.append((self.samples[-1][0] if self.samples else 0.0, self._read()))

    @property
    def peak_bytes(self) -> int:
        return max((b for _, b in self.samples), default=0)
