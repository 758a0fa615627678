"""Memory: the sampler's sources (NVML, RSS fallback), its timeline, and the sharding gate on real jobs.

No GPU exists on the machines this suite is developed on, so the NVML path is exercised against a
FAKE ``pynvml`` module below; that fake exists only for that reason. Everything else is real: RSS of
this process, and two-rank jobs launched through torchrun.
"""

from __future__ import annotations

import sys
import time
import types

import pytest

from scalegate import strategies
from scalegate.checks import sharding
from scalegate.contract.errors import SpecError
from scalegate.contract.faults import Faults
from scalegate.contract.spec import CaseSpec
from scalegate.launch import run_case
from scalegate.measure.memory import MAX_TIMELINE_POINTS, MemorySampler, downsample, process_reader


def fake_pynvml(used_by_us: int | None, device_used: int, pid: int) -> types.ModuleType:
    """A stand-in for nvidia-ml-py: only because this machine has no GPU (nvmlInit raises
    NVMLError_LibraryNotFound here). It answers the calls the sampler makes."""
    fake = types.ModuleType("pynvml")
    fake.calls = []
    fake.nvmlInit = lambda: fake.calls.append("init")
    fake.nvmlDeviceGetCount = lambda: 2
    fake.nvmlDeviceGetHandleByIndex = lambda index: ("handle", index)
    procs = [types.SimpleNamespace(pid=pid + 1, usedGpuMemory=999)]
    if used_by_us is not None:
        procs.append(types.SimpleNamespace(pid=pid, usedGpuMemory=used_by_us))
    fake.nvmlDeviceGetComputeRunningProcesses = lambda handle: procs
    fake.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(used=device_used, total=80 << 30)
    return fake


@pytest.mark.usefixtures("stand_in_gpus")
def test_nvml_path_reads_this_process_on_its_device(monkeypatch):
    import os

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(used_by_us=3 << 30, device_used=7 << 30, pid=os.getpid()))
    with MemorySampler("cuda", 1, interval_s=0.005) as sampler:
        time.sleep(0.03)
    assert sampler.source == "nvml"
    assert sampler.peak_bytes == 3 << 30  # this process's share, not the other process's 999 B
    # NVML started once by the memory reader and once by the GPU state (measure/gpu_state.py), never per sample
    assert sys.modules["pynvml"].calls == ["init", "init"]


@pytest.mark.usefixtures("stand_in_gpus")
def test_nvml_path_falls_back_to_device_used_when_the_process_is_not_listed(monkeypatch):
    import os

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(used_by_us=None, device_used=7 << 30, pid=os.getpid()))
    with MemorySampler("cuda", 0, interval_s=0.005) as sampler:
        time.sleep(0.02)
    assert sampler.source == "nvml" and sampler.peak_bytes == 7 << 30


@pytest.mark.usefixtures("stand_in_gpus")
def test_a_swapped_out_ranks_whole_process_is_read_by_its_pid_and_never_as_the_whole_device(monkeypatch):
    """The swap's idle figure (measure/swap.py) is what NVML attributes to the rank's pid; where NVML lists no such
    pid (a container's PID namespace) it is no reading, not the device's use, which holds the partner's job too."""
    import os

    fake = fake_pynvml(used_by_us=600 << 20, device_used=70 << 30, pid=os.getpid())
    read = process_reader(0, os.getpid(), nvml=fake)
    assert read is not None and read() == 600 << 20
    hidden = process_reader(0, os.getpid(), nvml=fake_pynvml(used_by_us=None, device_used=70 << 30, pid=os.getpid()))
    assert hidden is not None and hidden() is None


def _without_a_driver() -> None:
    """Skip where NVML works: the fallbacks are for machines without an NVIDIA driver."""
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return
    pytest.skip("NVML works on this machine; the fallback is for machines without a driver")


def test_without_nvml_a_swapped_out_ranks_process_is_not_read():
    _without_a_driver()
    assert process_reader(0, 1) is None


def test_without_nvml_the_sampler_falls_back_to_rss_and_says_why():
    _without_a_driver()
    with MemorySampler("cuda", 0, interval_s=0.01) as sampler:
        time.sleep(0.02)
    assert sampler.source.startswith("rss (nvml unavailable: NVMLError_LibraryNotFound"), sampler.source
    assert sampler.peak_bytes > 0


def test_rss_sampling_sees_a_deliberate_allocation():
    import torch

    with MemorySampler("cpu", interval_s=0.005) as idle:
        time.sleep(0.05)
    with MemorySampler("cpu", interval_s=0.005) as busy:
        time.sleep(0.03)
        block = torch.ones(64 << 20, dtype=torch.float32)  # 256 MiB, written so the pages are resident
        time.sleep(0.05)
        del block
        time.sleep(0.03)
    assert busy.source == "rss"
    assert busy.peak_bytes - idle.peak_bytes > 200 << 20, (busy.peak_bytes, idle.peak_bytes)
    assert len(busy.samples) >= 5


def test_timeline_is_downsampled_and_keeps_the_peak():
    samples = [(i * 0.01, 100 + (5000 if i == 777 else i % 7)) for i in range(2000)]
    line = downsample(samples, MAX_TIMELINE_POINTS)
    assert len(line) == MAX_TIMELINE_POINTS
    assert max(b for _, b in line) == 5100
    assert [t for t, _ in line] == sorted(t for t, _ in line)
    assert downsample(samples[:10], MAX_TIMELINE_POINTS) == [(round(t, 4), b) for t, b in samples[:10]]


def test_memory_interval_must_be_positive():
    with pytest.raises(SpecError, match="memory_interval_ms=0"):
        CaseSpec.of(strategy="ddp", model="cnn", preset="tiny", topology="1x2", micro_batch=32, memory_interval_ms=0)
    with pytest.raises(ValueError):
        MemorySampler("cpu", interval_s=0)


def spec(strategy: str) -> CaseSpec:
    return CaseSpec.of(
        strategy=strategy,
        model="cnn",
        preset="tiny",
        topology="1x2",
        micro_batch=32,
        steps=3,
        warmup=1,
        memory_interval_ms=20,
    )


@pytest.fixture(scope="module")
def ddp_result(tmp_path_factory, agents):
    return run_case(spec("ddp"), tmp_path_factory.mktemp("ddp") / "case", agents=agents)


def test_every_rank_reports_peak_timeline_source_and_cpu(ddp_result):
    for rank in ddp_result.ranks:
        assert rank.peak_memory_bytes > 50 << 20 and rank.memory_source == "rss"
        assert 1 <= len(rank.memory_timeline) <= MAX_TIMELINE_POINTS and rank.memory_interval_s == 0.02
        assert max(b for _, b in rank.memory_timeline) == rank.peak_memory_bytes
        assert rank.cpu_user_s > 0 and rank.wall_s > 0 and rank.cuda_memory == {}


def test_rank_0_counts_the_flops_of_the_single_process_step_on_the_global_batch(ddp_result):
    from scalegate import workloads
    from scalegate.measure import flops

    spec = ddp_result.spec
    workload = workloads.resolve(spec)(spec.preset, spec.run.seed)
    inputs, targets = workload.global_batch(0, spec.global_batch_size)
    counter = flops.StepFlops(enabled=True)
    with counter.counting():  # the same model, batch and loss as the reference step the rank counted
        workload.loss(workload.build_model()(inputs), targets).backward()
    first, second = ddp_result.ranks
    assert first.flops_per_step == counter.total > 0 and first.flops_by_op == counter.by_op
    assert second.flops_per_step is None and second.flops_unavailable == "counted on rank 0 only"
    assert first.tokens_per_sample is None  # images: no tokens/s


def test_ddp_holds_exactly_the_analytic_replica(ddp_result):
    # This is why a sharded case needs no DDP run: the analytic replica is what DDP measurably holds.
    for rank in ddp_result.ranks:
        full, held = rank.full_state_bytes, rank.state_bytes
        assert held["params"] == full["params"] and held["grads"] == full["grads"]
        # AdamW's per-tensor scalar ``step`` is the only difference: a few bytes per tensor
        assert 0 <= held["optimizer"] - full["optimizer"] <= 8 * full["tensors"]
    assert sharding.check(ddp_result) is None  # DDP promises nothing


def test_a_strategy_that_stops_sharding_optimizer_state_fails_with_the_byte_counts(ddp_result):
    # Injected fault: a "ZeRO-1" that keeps a full copy of the optimizer state on every rank is
    # exactly DDP's real state judged against ZeRO-1's promise.
    message = sharding.check(ddp_result, promised=("optimizer",))
    assert message is not None
    first = message.splitlines()[0]
    assert first.startswith("optimizer state not sharded [ddp ddp-cnn-1x2] rank 0: holds 9.818 MB")
    full = ddp_result.ranks[0].full_state_bytes["optimizer"]
    assert f"an unsharded DDP replica holds 9.818 MB ({full} B)" in first
    assert f"expected 1/2 of it = 4.909 MB ({full // 2} B)" in first
    assert "rank 1" in message.splitlines()[1]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["fsdp", "zero1-torch"])
@pytest.mark.nightly  # nightly: the sharding gate's fault test is in the fast tier
def test_sharded_strategies_keep_their_promise(strategy, tmp_path, agents):
    result = run_case(spec(strategy), tmp_path / "case", agents=agents)
    assert sharding.check(result) is None
    declared, _ = sharding.promise(result)  # what the ranks reported their strategy promises
    assert declared == strategies.get(strategy).shards
    total = {k: sum(r.state_bytes[k] for r in result.ranks) for k in declared}
    for kind in declared:  # together the ranks hold one copy, no more
        assert total[kind] <= result.ranks[0].full_state_bytes[kind] * 1.01
    if strategy == "fsdp":
        for ratios in sharding.ratios(result):
            assert all(abs(v - 0.5) < 0.01 for v in ratios.values()), ratios


def test_state_bytes_count_every_byte_of_a_storage_once():
    import torch

    from scalegate.measure.state_bytes import tensor_bytes

    flat = torch.zeros(100)  # a flat buffer and overlapping per-parameter views into it (DeepSpeed)
    assert tensor_bytes([flat[:50], flat[25:75], flat]) == 400
    assert tensor_bytes([flat[:50], flat[50:]]) == 400
    assert tensor_bytes([torch.zeros(3), torch.zeros(3), None]) == 24
    seen: dict = {}
    assert tensor_bytes([flat], seen) == 400 and tensor_bytes([flat[10:20]], seen) == 0  # shared across kinds


def test_memory_above_the_baseline_fails_with_rank_size_and_source(ddp_result, tmp_path, agents):
    from scalegate.figures import resources
    from scalegate.record import baselines

    key, where = "ddp-cnn-1x2:tiny", "ddp-cnn-1x2:tiny on cpu-test"
    entry = {
        "peak_memory_bytes": {
            "value": [r.peak_memory_bytes for r in ddp_result.ranks],
            "tolerance": resources.DEFAULT_MEMORY_TOLERANCE,
        },
        "memory_source": resources.memory_source(ddp_result),
    }
    baselines.update(tmp_path / "baselines", "cpu-test", {}, {key: entry})
    base = baselines.load(tmp_path / "baselines", "cpu-test")
    from scalegate.judge import judge
    from scalegate.judge.evidence import from_results

    assert judge(from_results([ddp_result], [], key=key, profile="cpu-test"), base).status != "regressed"
    # Injected fault: every rank holds 400 MiB more through the measured steps.
    faulty = run_case(spec("ddp").replace(faults=Faults(hold_memory_mb=400)), tmp_path / "faulty", agents=agents)
    outcome = judge(from_results([faulty], [], key=key, profile="cpu-test"), base)
    problems = [m.message for m in outcome.metrics if m.status == "regressed"]
    assert outcome.status == "regressed"
    assert len(problems) == 2, problems
    for rank, line in zip(faulty.ranks, problems):
        assert line.startswith(
            f"peak memory of rank {rank.rank} {rank.peak_memory_bytes / 2**20:.1f} MiB is above "
            f"baseline {ddp_result.ranks[rank.rank].peak_memory_bytes / 2**20:.1f} MiB"
        )
        assert line.endswith(f"(tolerance 25%, source rss [warm launcher]) [{where}]")  # RSS is judged per launcher


def test_on_cuda_the_judged_peak_is_the_allocators_with_nvmls_beside_it_and_a_tight_tolerance():
    """No GPU here: the window's allocator reading is set by hand (what ``close`` reads from torch.cuda on one)."""
    import torch

    from scalegate.figures import resources
    from scalegate.strategies.base import RankContext
    from scalegate.worker.measured import ALLOCATOR, MeasuredWindow

    ctx = RankContext(rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0, device=torch.device("cpu"))
    window = MeasuredWindow(
        CaseSpec.of(strategy="single", model="cnn", preset="tiny", topology="1x1", micro_batch=8), ctx
    )
    assert window.memory()["memory_source"].startswith("rss")  # off CUDA: the sampler's RSS
    window.allocator_peak = 145_891_840  # as torch.cuda.max_memory_allocated returned it on an H200
    found = window.memory()
    assert found["peak_memory_bytes"] == 145_891_840 and found["memory_source"] == ALLOCATOR
    assert "device_peak_bytes" in found and found["device_peak_source"] == window.sampler.source
    assert resources.memory_tolerance(ALLOCATOR) == 0.02 and resources.memory_tolerance("rss") == 0.25
