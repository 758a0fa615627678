"""Which NVML device a CUDA device index names (contract/nvml.py), for every reader of NVML: a rank's memory sampler,
its GPU state and its swap's idle reading (by the device's UUID), and the gate's free-memory check (through
``CUDA_VISIBLE_DEVICES``).

There is no GPU on the machines these tests run on, so NVML is a stand-in here (``Node``): a module object of eight
GPUs that answers the calls those readers make, with another job's process on GPU 0. Every reader must find the rank's
GPU 4 under ``CUDA_VISIBLE_DEVICES=4,5,6,7``, never GPU 0.
"""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest

from scalegate.contract import nvml
from scalegate.gate import pairing
from scalegate.launch import duet_fit
from scalegate.measure import gpu_state
from scalegate.measure.memory import MemorySampler, process_reader

GIB = 2**30
pytestmark = pytest.mark.usefixtures("stand_in_gpus")
OTHER_JOB = 999_999  # a pid on GPU 0 that is not this process


def uuid(i: int) -> str:
    return f"GPU-{i:08x}-1111-2222-3333-{444444444444 + i}"


class Node(SimpleNamespace):
    """A stand-in for pynvml (no GPU here): eight GPUs in NVML's order; GPU 0 runs another job (60 GiB used, 20 free),
    and this process holds ``ours`` bytes on GPU ``mine``."""

    def __init__(self, mine: int = 4, ours: int = 3 * GIB):
        super().__init__(mine=mine, ours=ours, asked=[])

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 8

    def nvmlDeviceGetHandleByIndex(self, index):
        if not 0 <= index < 8:
            raise LookupError(f"NVML_ERROR_INVALID_ARGUMENT: {index}")
        self.asked.append(index)
        return index

    def nvmlDeviceGetHandleByUUID(self, name):
        if name not in [uuid(i) for i in range(8)]:
            raise LookupError(f"NVML_ERROR_NOT_FOUND: {name}")
        return [uuid(i) for i in range(8)].index(name)

    def nvmlDeviceGetUUID(self, handle):
        return uuid(handle)

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        if handle == 0:
            return [SimpleNamespace(pid=OTHER_JOB, usedGpuMemory=60 * GIB)]
        if handle == self.mine:
            return [SimpleNamespace(pid=os.getpid(), usedGpuMemory=self.ours)]
        return []

    def nvmlDeviceGetMemoryInfo(self, handle):
        used = 60 * GIB if handle == 0 else (self.ours if handle == self.mine else 0)
        return SimpleNamespace(used=used, free=80 * GIB - used, total=80 * GIB)


def test_cuda_visible_devices_maps_a_cuda_index_to_nvmls_gpu(monkeypatch):
    node = Node()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert nvml.visible(node) == list(range(8))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert nvml.visible(node) == [4, 5, 6, 7] and nvml.locate(node, 0) == (4, nvml.BY_ENV)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{uuid(6)},{uuid(2)[:12]}")  # a whole UUID, and a prefix as CUDA takes
    assert nvml.visible(node) == [6, 2]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1,foo,5")  # CUDA stops at the first entry it cannot read
    assert nvml.visible(node) == [3, 1]


def test_a_rank_finds_its_gpu_by_uuid_whatever_cuda_visible_devices_says(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # even where the environment is misleading
    node = Node()
    assert nvml.locate(node, 0, uuid=uuid(5)[4:]) == (5, nvml.BY_UUID)  # torch's str(uuid) has no GPU- prefix
    assert nvml.locate(node, 0, uuid="deadbeef") == (0, nvml.BY_ENV)  # a UUID NVML does not know: the environment's GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4")
    with pytest.raises(nvml.NvmlDeviceError, match=r"CUDA device 1 \(NVML knows no GPU of its UUID deadbeef\)"):
        nvml.locate(node, 1, uuid="deadbeef")


def test_devices_nvml_cannot_tell_apart_are_named_with_the_fix(monkeypatch):
    node = Node()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "8,9")
    with pytest.raises(nvml.NvmlDeviceError, match=r"names GPU 8, and NVML sees 8; name the GPUs by UUID"):
        nvml.visible(node)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-0000")  # a prefix of every GPU's UUID
    with pytest.raises(nvml.NvmlDeviceError, match="names GPU-0000, which matches 8 of NVML's GPUs"):
        nvml.visible(node)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    with pytest.raises(nvml.NvmlDeviceError, match="CUDA device 2 is not among the 2 that CUDA_VISIBLE_DEVICES=4,5"):
        nvml.locate(node, 2)


def test_a_ranks_memory_sampler_gpu_state_and_swap_read_its_own_gpu_not_nvmls_gpu_0(monkeypatch):
    """torch has no CUDA here, so the rank's readers take the environment's mapping (on a GPU they take the UUID)."""
    node = Node()
    monkeypatch.setitem(sys.modules, "pynvml", node)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    with MemorySampler("cuda", 0, interval_s=0.005) as sampler:
        pass
    assert sampler.source == "nvml" and sampler.peak_bytes == 3 * GIB  # GPU 0's 60 GiB is another job's
    assert gpu_state.locate(node, 1)[0] == 5
    assert gpu_state.GpuState(0, nvml=node).fixed["found_by"] == "CUDA_VISIBLE_DEVICES"
    monkeypatch.setattr(gpu_state, "cuda_uuid", lambda index: uuid(6)[4:])  # what torch would give on a GPU
    assert gpu_state.GpuState(0, nvml=node).fixed["found_by"] == "UUID" and gpu_state.locate(node, 0)[0] == 6
    monkeypatch.setattr(gpu_state, "cuda_uuid", lambda index: None)
    read = process_reader(0, os.getpid(), nvml=node)
    assert read is not None and read() == 3 * GIB
    node.asked.clear()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "8")  # a device NVML cannot match: no reading, never GPU 0's
    assert process_reader(0, os.getpid(), nvml=node) is None and 0 not in node.asked


def test_the_gates_free_memory_is_each_visible_gpus_in_cudas_order(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", Node())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert duet_fit.free_bytes() == [80 * GIB, 20 * GIB]


def test_a_gate_that_cannot_match_the_gpus_alternates_every_case_with_a_peak_and_says_why(monkeypatch, tmp_path):
    """No case is made resident twice on a guess of whose GPU is free."""
    monkeypatch.setitem(sys.modules, "pynvml", Node())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "8,9")
    launch = {"peak_memory_bytes": [GIB, GIB], "memory_source": "nvml"}
    merged = {"base": [{"case_id": "ddp-x-1x2", "record": {"launches": [launch]}}], "head": []}
    found = pairing._refusals(tmp_path)(merged)
    assert list(found) == ["ddp-x-1x2"]
    assert found["ddp-x-1x2"].startswith("GPU memory could not be read: CUDA_VISIBLE_DEVICES=8,9 names GPU 8")
