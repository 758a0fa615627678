"""The GPU's own state through a rank's measured window, from NVML: what drives a GPU's step time besides the code.

Clocks idle low without persistence mode, and thermal or power capping lowers them mid-run; a round whose clocks were
capped measures the GPU, not the commit. ``GpuState`` reads the rank's device at the window's start, about once a
second through it (from the memory sampler's thread: measure/memory.py) and at its end, and keeps what a verdict
needs: the SM and memory clocks (lowest and highest), the hottest temperature, the highest power draw and the limit,
every clock-event (throttle) reason seen, persistence mode, and whether application clocks are set away from the
default, and how NVML's device was found (``found_by``: by the rank's UUID, or through ``CUDA_VISIBLE_DEVICES``:
contract/nvml.py). Off CUDA, or where NVML cannot start, it says why instead. Worker side.
"""

from __future__ import annotations

from typing import Any, Callable

from scalegate.contract import nvml as nvml_device

EVERY_S = 1.0  # seconds between two readings inside the window
# NVML's clock-event reasons (nvmlClocksEventReason*), by bit: the names a verdict uses. GpuIdle and the settings
# are what a rank between steps or a locked clock shows; the others lower the clocks under load.
REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
CAPPING = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


class GpuState:
    """Readings of one device through a window; ``nvml``: the pynvml module (a stand-in in unit tests, where no GPU
    exists)."""

    def __init__(self, device_index: int, nvml: Any = None) -> None:
        if nvml is None:
            import pynvml as nvml
        self.nvml = nvml
        nvml.nvmlInit()
        self.handle, found_by = locate(nvml, device_index)
        self.readings: list[dict[str, Any]] = []
        self.fixed = {**self._fixed(), "found_by": found_by}

    def _fixed(self) -> dict[str, Any]:
        """What does not move within a window: persistence mode, the power limit, the clocks' settings."""
        n, h = self.nvml, self.handle
        app = _maybe(lambda: n.nvmlDeviceGetApplicationsClock(h, n.NVML_CLOCK_SM))
        default = _maybe(lambda: n.nvmlDeviceGetDefaultApplicationsClock(h, n.NVML_CLOCK_SM))
        return {
            "persistence": _maybe(lambda: n.nvmlDeviceGetPersistenceMode(h) == 1),
            "power_limit_w": _maybe(lambda: n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000),
            "max_sm_clock_mhz": _maybe(lambda: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM)),
            "app_sm_clock_mhz": app,
            "default_app_sm_clock_mhz": default,
            "clocks_locked": None if app is None or default is None else app != default,
        }

    def read(self) -> None:
        n, h = self.nvml, self.handle
        # the reasons' name changed in nvidia-ml-py 12.535; a library with neither gives no reasons, as a GPU that
        # does not report them (a reading must not end the memory sampler's thread)
        reasons = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            n, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        self.readings.append(
            {
                "sm_mhz": _maybe(lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
                "mem_mhz": _maybe(lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
                "temperature_c": _maybe(lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
                "power_w": _maybe(lambda: n.nvmlDeviceGetPowerUsage(h) / 1000),
                "reasons": _maybe(lambda: int(reasons(h))) or 0,
            }
        )

    def summary(self) -> dict[str, Any]:
        """The window's state for the rank's result (``extra["gpu_state"]``)."""
        found = self.readings

        def seen(key: str) -> list[float]:
            return [r[key] for r in found if r[key] is not None]

        bits = 0
        for r in found:
            bits |= r["reasons"]
        return {
            "readings": len(found),
            "sm_clock_mhz": _span(seen("sm_mhz")),
            "mem_clock_mhz": _span(seen("mem_mhz")),
            "temperature_c_max": max(seen("temperature_c"), default=None),
            "power_w_max": max(seen("power_w"), default=None),
            "reasons": [name for bit, name in REASONS.items() if bits & bit],
            "capped": [name for bit, name in REASONS.items() if bits & bit and name in CAPPING],
            **self.fixed,
        }


def locate(nvml: Any, device_index: int) -> tuple[Any, str]:
    """NVML's handle of this rank's CUDA device ``device_index``, and how it was found: by the device's UUID, since
    torch's index counts only the GPUs ``CUDA_VISIBLE_DEVICES`` names and NVML's every GPU of the node
    (contract/nvml.py)."""
    return nvml_device.locate(nvml, device_index, cuda_uuid(device_index))


def cuda_uuid(device_index: int) -> str | None:
    """The UUID torch gives CUDA device ``device_index``; None where torch has no CUDA (a unit test's stand-in NVML),
    and NVML's device is then found through ``CUDA_VISIBLE_DEVICES``."""
    import torch

    if not torch.cuda.is_available():
        return None
    return str(torch.cuda.get_device_properties(device_index).uuid)


def unavailable(why: str) -> dict[str, Any]:
    return {"unavailable": why}


def _span(values: list[float]) -> list[float] | None:
    return [min(values), max(values)] if values else None


def _maybe(read: Callable[[], Any]) -> Any:
    """One NVML reading, or None where this GPU or driver does not give it (NVMLError_NotSupported)."""
    try:
        return read()
    except Exception:
        return None
