"""FLOPs, tokens/s and MFU: the counter, the peak table, the measured CPU peak, the judge's figures and gate.

The GPU peaks are looked up from device *names* here (there is no GPU on the CI machines): the table is what is
tested, with the names ``torch.cuda.get_device_name()`` reports on those GPUs. Everything else is real.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from scalegate.figures import peaks
from scalegate.judge import judge
from scalegate.measure import flops as flopcount
from scalegate.record import baselines
from scalegate.record.update import entries_from_run
from scalegate.report import table
from tests.test_judge import KEY, PROFILE, launch, record


@pytest.mark.parametrize(
    "name, dtype, flops",
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989e12),
        ("NVIDIA H100 PCIe", "bf16", 756e12),
        ("NVIDIA H100 NVL", "bf16", 835e12),
        ("NVIDIA H200", "bf16", 989e12),
        ("NVIDIA A100-SXM4-80GB", "bf16", 312e12),
        ("NVIDIA A100-SXM4-40GB", "fp32", 19.5e12),
        ("NVIDIA B200", "bf16", 2.25e15),
        ("AMD Instinct MI300X", "bf16", 1300e12),
    ],
)
def test_a_known_gpu_gets_its_datasheet_peak_with_the_source(name, dtype, flops):
    peak = peaks.gpu_peak(name, dtype)
    assert peak.flops == flops
    assert "datasheet" in peak.source and dtype in peak.source


def test_an_unknown_gpu_or_dtype_says_n_a_and_why_never_a_guess():
    unknown = peaks.gpu_peak("NVIDIA GeForce GTX 1080", "fp32")
    assert unknown.flops is None and unknown.source.startswith("n/a:") and "GTX 1080" in unknown.source
    assert "GPU_PEAKS" in unknown.source  # where to add it
    no_figure = peaks.gpu_peak("NVIDIA B200", "fp32")
    assert no_figure.flops is None and "no fp32 figure" in no_figure.source


def test_the_cpu_peak_is_measured_once_per_process_and_labelled_so():
    first = peaks.peak_for("cpu", "AMD EPYC", "fp32", threads=1)
    assert first.flops and first.flops > 1e8 and first.source.startswith("measured:")
    assert peaks.peak_for("cpu", "AMD EPYC", "fp32", threads=1) is first  # cached: once per session


def test_mfu_arithmetic():
    achieved, value = peaks.mfu(flops_per_step=6e9, samples_per_s=100.0, global_batch=64, world_size=2, peak=10e9)
    assert achieved == pytest.approx(6e9 / 64 * 100 / 2) and value == pytest.approx(achieved / 10e9)
    assert peaks.mfu(None, 100.0, 64, 2, 10e9) == (None, None)
    assert peaks.mfu(6e9, 100.0, 64, 2, None)[1] is None


def _count(model, *inputs):
    counter = flopcount.StepFlops(enabled=True)
    with counter.counting():
        out = model(*inputs)
        (out[0] if isinstance(out, tuple) else out).sum().backward()
    return counter.result()


def test_the_step_counter_counts_matmuls_forward_and_backward():
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    found = _count(mlp, torch.randn(5, 8))
    # forward 2*5*(8*16 + 16*4); backward: both weight gradients, and the input gradient of the second layer only
    assert found["flops_per_step"] == 2 * 5 * (8 * 16 + 16 * 4) + 2 * 5 * (8 * 16 + 16 * 4) + 2 * 5 * 16 * 4
    assert found["flops_by_op"] == {"addmm": 1920, "mm": 2560} and found["flops_unavailable"] == ""


def test_the_fused_cpu_lstm_layer_is_counted_too():
    lstm = torch.nn.LSTM(28, 32, batch_first=True)
    found = _count(lstm, torch.randn(4, 28, 28))
    forward = 2 * 28 * 4 * (4 * 32) * (28 + 32)  # per step: x W_ih^T + h W_hh^T for 4 gates
    assert found["flops_per_step"] == 3 * forward  # backward: twice the forward's matmuls


def test_a_step_with_no_counted_op_says_so():
    counter = flopcount.StepFlops(enabled=True)
    with counter.counting():
        (torch.randn(3, requires_grad=True) * 2).sum().backward()
    assert counter.result()["flops_per_step"] is None and "counted no matmul" in counter.result()["flops_unavailable"]
    assert flopcount.StepFlops(enabled=False).result()["flops_unavailable"] == "counted on rank 0 only"


def _mfu_baseline(tmp_path, value: float) -> baselines.BaselineFile:
    entry = {"mfu": {"value": value, "tolerance": 0.10}, "noise_rel": 0.02}
    baselines.update(tmp_path, PROFILE, {}, {KEY: entry})
    return baselines.load(tmp_path, PROFILE)


# 64 samples per 40 ms step on 2 devices, 3.2e9 FLOPs a step: 40 GFLOP/s per device, half of an 80 GFLOP/s peak
FLOPS = dict(flops_per_step=3.2e9, peak_flops=80e9, peak_source="measured: test", tokens_per_sample=128)


def test_the_judge_reports_tokens_achieved_flops_and_mfu():
    outcome = judge(record(**FLOPS), None)
    assert outcome.mfu == pytest.approx(0.5, rel=0.02) and outcome.achieved_flops == pytest.approx(40e9, rel=0.02)
    assert outcome.tokens_per_s == pytest.approx(64 / 0.040 * 128, rel=0.02) and outcome.mfu_ci is not None
    none = judge(record(flops_per_step=3.2e9, peak_source="n/a: 'GTX 1080' is not in the peak table"), None)
    assert none.mfu is None and none.mfu_unavailable.startswith("n/a: 'GTX 1080'")
    uncounted = judge(record(flops_unavailable="counted on rank 0 only", **{**FLOPS, "flops_per_step": None}), None)
    assert uncounted.mfu is None and "FLOPs counted on rank 0 only" in uncounted.mfu_unavailable


GPU = {**FLOPS, "peak_source": "NVIDIA H100 datasheet (SXM), dense: 989 TFLOP/s bf16"}


def test_the_mfu_gate_catches_a_slower_step_and_says_so(tmp_path):
    baseline = _mfu_baseline(tmp_path, 0.5)
    assert judge(record(**GPU), baseline).metrics[-1].status == "ok"
    slow = record(launch(step_s=0.060), **GPU)  # the same FLOPs in 1.5x the time: MFU 0.33
    outcome = judge(slow, baseline)
    found = next(m for m in outcome.metrics if m.metric == "mfu")
    assert found.status == "regressed" and outcome.status == "regressed"
    assert found.message.startswith("MFU 0.333 is below baseline 0.500 (tolerance 10%")
    assert "[ddp-cnn-1x2:tiny on cpu-test]" in found.message and "peak: NVIDIA H100 datasheet" in found.message


def test_against_a_measured_cpu_peak_mfu_is_gated_only_where_the_test_opts_in(tmp_path):
    baseline = _mfu_baseline(tmp_path, 0.5)
    slow = record(launch(step_s=0.060), **FLOPS)  # peak "measured: test"
    assert not [m for m in judge(slow, baseline).metrics if m.metric == "mfu"]
    opted = judge(record(launch(step_s=0.060), tolerances={"mfu": 0.1}, **FLOPS), baseline)
    assert next(m for m in opted.metrics if m.metric == "mfu").status == "regressed"


def test_mfu_is_not_judged_on_an_oversubscribed_topology(tmp_path):
    slow = record(launch(step_s=0.060), oversubscribed=True, **GPU)
    assert not [m for m in judge(slow, _mfu_baseline(tmp_path, 0.5)).metrics if m.metric == "mfu"]


def test_the_table_shows_mfu_or_n_a_and_baselines_record_it():
    outcome = judge(record(**FLOPS), None)
    case = {
        **dataclasses.asdict(outcome),
        "spec": {"preset": "tiny"},
        "result": {"throughput": 1600.0, "ranks": [{"peak_memory_bytes": 1}, {"peak_memory_bytes": 1}]},
    }
    row = dict(zip(table.HEADER, table.rows([case])[0]))
    assert row["MFU"] == "50.0%" and row["tokens/s"] == "204800"
    assert dict(zip(table.HEADER, table.rows([{**case, "mfu": None}])[0]))["MFU"] == "n/a"
    entry = {
        **case,
        "key": KEY,
        "status": "ok",
        "spec": {"steps": 20, "warmup": 5, "faults": {}},
        "result": {**case["result"], "losses": [1.0], "median_step_s": 0.04},
    }
    written, _ = entries_from_run([entry], tolerance=0.1)
    assert written[KEY]["mfu"] == {"value": pytest.approx(0.5, rel=0.02), "tolerance": 0.1, "peak": "measured: test"}
