"""A per-rank memory sampler thread: NVML on NVIDIA GPUs, the process's RSS elsewhere.

Only the samples taken while the sampler runs count, so set-up and warm-up spikes are kept out of
the measured peak (the CUDA allocator's own peaks are reported beside it on GPUs). The result says
which source it used; without NVML (no driver: ``NVMLError_LibraryNotFound``) it falls back to RSS
and says why. The timeline is kept, downsampled to at most ``MAX_TIMELINE_POINTS`` (peak-preserving).
On a GPU the same thread reads the device's clocks, temperature, power and throttle reasons about once a
second (measure/gpu_state.py).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

import psutil

from scalegate.measure import gpu_state

DEFAULT_INTERVAL_S = 0.05
MAX_TIMELINE_POINTS = 200


class MemorySampler:
    def __init__(
        self, device_type: str, device_index: int | None = None, interval_s: float = DEFAULT_INTERVAL_S
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"memory sampling interval {interval_s}s must be positive")
        self.interval_s = interval_s
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._process = psutil.Process(os.getpid())
        self.state: gpu_state.GpuState | None = None
        self.state_why = "not a CUDA device"  # why there is no GPU state, where there is none
        self._read, self.source = self._pick_source(device_type, device_index)
        self._thread = threading.Thread(target=self._run, name="scalegate-memory", daemon=True)

    def _pick_source(self, device_type: str, device_index: int | None) -> tuple[Callable[[], int], str]:
        if device_type != "cuda":
            return self._rss, "rss"
        try:
            reader = nvml_reader(device_index or 0, os.getpid())
        except Exception as exc:  # NVMLError_LibraryNotFound and friends: fall back, and say so
            self.state_why = f"nvml unavailable: {type(exc).__name__}: {exc}"
            return self._rss, f"rss ({self.state_why})"
        try:
            self.state = gpu_state.GpuState(device_index or 0)
        except Exception as exc:
            self.state_why = f"nvml gave no device state: {type(exc).__name__}: {exc}"
        return reader, "nvml"

    def _rss(self) -> int:
        return int(self._process.memory_info().rss)

    def _run(self) -> None:
        start = last_state = time.perf_counter()
        if self.state is not None:
            self.state.read()
        while not self._stop.is_set():
            self.samples.append((time.perf_counter() - start, self._read()))
            if self.state is not None and time.perf_counter() - last_state >= gpu_state.EVERY_S:
                self.state.read()
                last_state = time.perf_counter()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.samples.append((self.samples[-1][0] if self.samples else 0.0, self._read()))
        if self.state is not None:
            self.state.read()

    def gpu_state(self) -> dict[str, Any]:
        """The device's state through the window (``extra["gpu_state"]``), or why there is none."""
        return self.state.summary() if self.state is not None else gpu_state.unavailable(self.state_why)

    @property
    def peak_bytes(self) -> int:
        return max((b for _, b in self.samples), default=0)

    def timeline(self, max_points: int = MAX_TIMELINE_POINTS) -> list[tuple[float, int]]:
        return downsample(self.samples, max_points)


def nvml_reader(device_index: int, pid: int) -> Callable[[], int]:
    """Bytes this process uses on its CUDA device ``device_index`` (the device's used memory if NVML cannot attribute
    it)."""
    import pynvml

    pynvml.nvmlInit()
    handle, _ = gpu_state.locate(pynvml, device_index)

    def read() -> int:
        held = _attributed(pynvml, handle, pid)
        return held if held is not None else int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)

    read()  # fail here, at set-up, rather than inside the sampling thread
    return read


def process_reader(device_index: int, pid: int, nvml: Any = None) -> Callable[[], int | None] | None:
    """A reader of the bytes NVML attributes to ``pid`` on CUDA device ``device_index`` (its CUDA context, NCCL's
    buffers and its allocator's reserve): None where there is no NVML; the reader answers None where NVML lists no such
    process (a container whose PID namespace hides the host's pids) rather than the device's whole use. ``nvml``: the
    pynvml module (a stand-in in unit tests, where no GPU exists)."""
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
        handle, _ = gpu_state.locate(nvml, device_index)
    except Exception:  # no pynvml, no driver, a device NVML cannot match: nothing to attribute
        return None

    def read() -> int | None:
        try:
            return _attributed(nvml, handle, pid)
        except Exception:  # NVMLError mid-run: no reading rather than a failed rank
            return None

    return read


def _attributed(nvml: Any, handle: Any, pid: int) -> int | None:
    for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
        if proc.pid == pid and proc.usedGpuMemory is not None:
            return int(proc.usedGpuMemory)
    return None


def downsample(samples: list[tuple[float, int]], max_points: int) -> list[tuple[float, int]]:
    """At most ``max_points`` samples: each bucket keeps its largest reading, so the peak survives."""
    if max_points < 1 or len(samples) <= max_points:
        return [(round(t, 4), b) for t, b in samples]
    out = []
    for i in range(max_points):
        bucket = samples[i * len(samples) // max_points : (i + 1) * len(samples) // max_points]
        t, b = max(bucket, key=lambda s: s[1])
        out.append((round(t, 4), b))
    return out


def cuda_peaks(device) -> dict[str, int]:
    """The CUDA caching allocator's peaks on ``device`` (empty off CUDA)."""
    if getattr(device, "type", None) != "cuda":
        return {}
    import torch

    return {
        "max_allocated": int(torch.cuda.max_memory_allocated(device)),
        "max_reserved": int(torch.cuda.max_memory_reserved(device)),
    }
