"""The GPU's own state through a window (measure/gpu_state.py) and what the verdict says of it (judge/gpu.py).

There is no GPU on the machines these tests run on, so NVML is a stand-in here (``FakeNvml``): a module object that
answers the calls gpu_state.py makes with readings a GPU could give. The real module is read on a GPU only
(``selftest --gpu`` records it per round: docs/verified-on-gpu.md).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from scalegate.judge import duet as paired
from scalegate.judge import gpu
from scalegate.judge.evidence import CaseRecord, LaunchRecord
from scalegate.judge.outcome import Overrides
from scalegate.measure import gpu_state

pytestmark = pytest.mark.usefixtures("stand_in_gpus")


class FakeNvml(SimpleNamespace):
    """A stand-in for pynvml (no GPU here): one device whose readings follow ``clocks`` and ``reasons``."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self, clocks, reasons, persistence=1, app=1980, default=1980):
        super().__init__(clocks=list(clocks), reasons=list(reasons), persistence=persistence, app=app, default=default)
        self.read = 0

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetPersistenceMode(self, h):
        return self.persistence

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1980

    def nvmlDeviceGetApplicationsClock(self, h, kind):
        return self.app

    def nvmlDeviceGetDefaultApplicationsClock(self, h, kind):
        return self.default

    def nvmlDeviceGetClockInfo(self, h, kind):
        return self.clocks[min(self.read, len(self.clocks) - 1)] if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 60 + self.read

    def nvmlDeviceGetPowerUsage(self, h):
        return 500_000 + 10_000 * self.read

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        found = self.reasons[min(self.read, len(self.reasons) - 1)]
        self.read += 1
        return found


def test_a_window_keeps_its_clock_span_its_hottest_reading_and_every_capping_reason():
    nvml = FakeNvml(clocks=[1980, 1755, 1410], reasons=[0, 0x4, 0x4 | 0x40])  # power cap, then thermal too
    state = gpu_state.GpuState(0, nvml=nvml)
    for _ in range(3):
        state.read()
    found = state.summary()
    assert found["sm_clock_mhz"] == [1410, 1980] and found["mem_clock_mhz"] == [2619, 2619]
    assert found["temperature_c_max"] == 62 and found["power_w_max"] == 520 and found["power_limit_w"] == 700
    assert found["capped"] == ["sw_power_cap", "hw_thermal_slowdown"]
    assert found["persistence"] is True and found["clocks_locked"] is False


def test_an_idle_or_locked_clock_is_a_reason_but_not_a_cap():
    state = gpu_state.GpuState(0, nvml=FakeNvml(clocks=[1410], reasons=[0x1 | 0x2], app=1410, default=1980))
    state.read()
    found = state.summary()
    assert found["reasons"] == ["gpu_idle", "applications_clocks_setting"] and found["capped"] == []
    assert found["clocks_locked"] is True


def test_without_nvml_a_window_says_why_instead():
    assert gpu.pool([gpu_state.unavailable("nvml unavailable: NVMLError_LibraryNotFound")]) == {
        "unavailable": "nvml unavailable: NVMLError_LibraryNotFound"
    }
    assert gpu.pool([{}, {}]) == {}  # CPU: nothing to say


def _state(capped=(), persistence=True, locked=True) -> dict:
    return {
        "capped": list(capped),
        "reasons": list(capped),
        "sm_clock_mhz": [1500, 1980],
        "temperature_c_max": 70,
        "power_w_max": 650,
        "persistence": persistence,
        "clocks_locked": locked,
    }


def _records(head_states, base_states) -> tuple[CaseRecord, CaseRecord]:
    def launch(state, step):
        return LaunchRecord(
            step_times_s=(step,) * 40,
            reference_step_times_s=(0.010,) * 40,
            duet="paired",
            reference_duet="paired",
            gpu_state=state,
        )

    def record(states, step):
        return CaseRecord(
            case_id="ddp-resnet-1x1",
            key="ddp-resnet-1x1:small",
            profile="cuda-h100",
            world_size=2,
            global_batch=64,
            steps=40,
            warmup=5,
            launches=tuple(launch(s, step) for s in states),
            reference_step_times_s=(0.010,) * 40,
            reference_global_batch=32,
        )

    return record(head_states, 0.011), record(base_states, 0.011)


def test_a_capped_round_is_named_in_the_verdict_with_its_side_and_reasons():
    head, base = _records([_state(), _state(("sw_power_cap",))], [_state(), _state()])
    found = paired.timing(head, base, None, Overrides())
    assert "GPU clocks capped in round 2 (head: sw_power_cap)" in found.message, found.message


def test_gpus_left_to_drift_get_a_hint_naming_the_fix():
    head, base = _records([_state(persistence=False, locked=False)] * 2, [_state()] * 2)
    found = paired.timing(head, base, None, Overrides())
    assert "HINT: persistence mode is off" in found.message and "nvidia-smi -pm 1" in found.message
    assert "clocks are not locked" in found.message and "nvidia-smi -lgc" in found.message


@pytest.mark.parametrize("bits", [0x8, 0x20, 0x80])
def test_every_capping_reason_counts(bits):
    state = gpu_state.GpuState(0, nvml=FakeNvml(clocks=[1200], reasons=[bits]))
    state.read()
    assert state.summary()["capped"] == [gpu_state.REASONS[bits]]
