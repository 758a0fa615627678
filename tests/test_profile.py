"""``--scaling-profile`` (a torch profiler trace per rank) and ``--scaling-tensorboard`` (scalars per case).

Everything is real: a two-rank DDP job under torchrun writing Chrome traces, the training loop in
this process, TensorBoard's own event writer and reader. The one stand-in is a missing
``tensorboard`` package, made by hiding it from the import system in this process.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from scalegate.contract.errors import SpecError
from scalegate.contract.results import RankResult, aggregate
from scalegate.contract.spec import CaseSpec
from scalegate.launch import run_case
from scalegate.measure.profiling import run_window
from scalegate.report import tensorboard as tb
from scalegate.session import Outcome
from scalegate.worker.loop import rank_context, train

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[1]
LABELS = ("batch", "forward_backward", "optimizer_step")


def trace_names(path: Path) -> Counter:
    with gzip.open(path, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    return Counter(e.get("name") for e in events)


def cnn(topology: str, **changes) -> CaseSpec:
    return CaseSpec.of(
        strategy="ddp" if topology != "1x1" else "single",
        model="cnn",
        preset="tiny",
        topology=topology,
        micro_batch=32,
        steps=3,
        warmup=1,
        **changes,
    )


def test_a_profiled_ddp_case_writes_one_chrome_trace_per_rank_with_labelled_steps(tmp_path, agents):
    profile_dir = tmp_path / "case" / "profile"
    result = run_case(cnn("1x2", profile_steps=2, profile_dir=str(profile_dir)), tmp_path / "case", agents=agents)
    assert sorted(p.name for p in profile_dir.iterdir()) == ["rank0.json.gz", "rank1.json.gz"]  # no temp files left
    for rank in result.ranks:
        path = profile_dir / f"rank{rank.rank}.json.gz"
        assert rank.extra["profile_trace"] == str(path) and path.stat().st_size > 1000
        names = trace_names(path)
        # two recorded steps; the profiler's warm-up step ran but is not in the trace
        assert all(names[label] == 2 for label in LABELS), names
        assert names["ProfilerStep#1"] == names["ProfilerStep#2"] == 1 and "ProfilerStep#0" not in names
        assert names["c10d::allreduce_"] > 0  # DDP's gradient all-reduce is in the window
        assert len(rank.step_times_s) == 3  # the measured steps are the measured steps, no more


def test_profiling_off_costs_nothing_it_runs_no_window(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = train(cnn("1x1"), rank_context(cnn("1x1")))
    assert result.extra == {} and list(tmp_path.iterdir()) == []


def test_a_window_without_a_directory_is_refused_before_any_step():
    steps = []
    with pytest.raises(SpecError, match="profile_steps >= 1 and a profile_dir"):
        run_window(2, "", 0, rank_context(cnn("1x1")).device, steps.append)
    assert steps == []


def _outcome(case_id: str = "ddp-cnn-1x2") -> Outcome:
    spec = cnn("1x2")
    ranks = [
        RankResult(
            rank=r,
            world_size=2,
            node_rank=0,
            host="h",
            device="cpu",
            step_times_s=[0.05, 0.04 + r / 100, 0.045],
            losses=[2.0, 1.5, 1.2],
            warmup_losses=[2.3],
            loss_weight=0.5,
            peak_memory_bytes=(400 + r) << 20,
        )
        for r in range(2)
    ]
    result = aggregate(spec, ranks)
    return Outcome(
        case_id=case_id,
        key=f"{case_id}@tiny",
        status="ok",
        message="",
        result=result,
        speedup=1.4,
        efficiency=0.7,
        resources={"wire": {"bytes_per_step": 9_836_716}},
    )


def test_tensorboard_scalars_read_back_with_their_tags_and_steps(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    outcome = _outcome()
    log_dir = tb.write_case(tmp_path / "run-1", outcome)
    assert log_dir == tmp_path / "run-1" / "ddp-cnn-1x2"
    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    read = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    assert sorted(read) == sorted(
        [
            "loss",
            "step_time_s",
            "throughput_samples_per_s",
            "step_time_median_s",
            "speedup",
            "efficiency",
            "bytes_per_step",
            "peak_memory_mib/rank0",
            "peak_memory_mib/rank1",
        ]
    )
    assert [s for s, _ in read["loss"]] == [0, 1, 2]
    assert [v for _, v in read["loss"]] == pytest.approx(outcome.result.losses)
    assert [v for _, v in read["step_time_s"]] == pytest.approx([0.05, 0.05, 0.045])  # the slowest rank's
    assert read["efficiency"] == [(0, pytest.approx(0.7))]
    assert read["throughput_samples_per_s"] == [(0, pytest.approx(outcome.result.throughput))]
    assert read["peak_memory_mib/rank1"] == [(0, 401.0)] and read["bytes_per_step"] == [(0, 9_836_716.0)]


def test_tensorboard_leaves_out_what_was_not_measured_and_writes_nothing_without_a_result(tmp_path):
    outcome = _outcome()
    bare = Outcome(case_id=outcome.case_id, key=outcome.key, status="failed", message="crashed")
    assert tb.write_case(tmp_path, bare) is None and list(tmp_path.iterdir()) == []
    unmeasured = Outcome(
        case_id=outcome.case_id,
        key=outcome.key,
        status="failed",
        message="",
        result=outcome.result,
        resources={"wire": {"bytes_per_step": None}},
    )
    tags = tb.scalars(unmeasured)
    assert "efficiency" not in tags and "bytes_per_step" not in tags and "loss" in tags
    assert all(not math.isnan(v) or tag == "loss" for tag, series in tags.items() for _, v in series)


@pytest.fixture
def no_tensorboard(monkeypatch):
    """This process without the tensorboard package: importing it raises ImportError, as when it is absent."""
    for name in list(sys.modules):
        if name == "tensorboard" or name.startswith(("tensorboard.", "torch.utils.tensorboard")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tensorboard", None)


def test_missing_tensorboard_is_a_readable_error_with_a_hint(no_tensorboard):
    with pytest.raises(SpecError) as caught:
        tb.require()
    assert "--scaling-tensorboard needs the tensorboard package" in caught.value.message
    assert "pip install -e .[report]" in caught.value.hint


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_scaling="def test_scaling(scaling_case, benchmark):\n    scaling_case.check(benchmark)\n")
    pytester.makeini("[pytest]\n")
    return pytester.runpytest_inprocess(
        "-p",
        "scalegate.plugin",
        "-p",
        "no:cacheprovider",
        "--co",
        "--scaling-results-dir",
        str(pytester.path / "results"),
        *args,
    )


@pytest.mark.parametrize(
    "args, says, hint",
    [
        (
            ["--scaling-tensorboard", "tb"],
            "--scaling-tensorboard needs the tensorboard package",
            "pip install -e .[report]",
        ),
        (
            ["--scaling-profile-steps", "2"],
            "--scaling-profile-steps 2 does nothing without --scaling-profile",
            "add --scaling-profile",
        ),
        (
            ["--scaling-profile", "--scaling-profile-steps", "0"],
            "--scaling-profile-steps=0 is not in 1..100",
            "traces grow",
        ),
    ],
    ids=["tensorboard-missing", "steps-without-profile", "zero-steps"],
)
def test_bad_profile_and_tensorboard_options_are_usage_errors(pytester, monkeypatch, no_tensorboard, args, says, hint):
    monkeypatch.delenv("SCALEGATE_RUN_ID", raising=False)
    result = _run(pytester, *args)
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out
    assert says in out and "HINT:" in out and hint in out, out
    assert "Traceback" not in out and not re.search(r"\.py:\d+: in ", out)


@pytest.mark.slow
@pytest.mark.nightly  # nightly: a whole profiled session; one profiled case is in the fast tier
def test_the_suite_profiles_every_case_and_writes_tensorboard_scalars(suite, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    done = suite(
        "-k",
        "not parity",
        "--scaling-strategies",
        "ddp,single",
        "--scaling-models",
        "cnn",
        "--scaling-steps",
        "4",
        "--scaling-warmup",
        "1",
        "--scaling-profile",
        "--scaling-profile-steps",
        "2",
        "--scaling-tensorboard",
        str(tmp_path / "tb"),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_dir = next((tmp_path / "results").glob("2*"))
    for case_id, world in (("ddp-cnn-1x2", 2), ("single-cnn-1x1", 1)):
        traces = json.loads((run_dir / f"{case_id}.json").read_text())["traces"]
        assert traces == [str((run_dir / case_id / "profile" / f"rank{r}.json.gz").resolve()) for r in range(world)]
        assert all(trace_names(Path(t))["forward_backward"] == 2 for t in traces)
        listed = ",".join(f"rank{r}.json.gz" for r in range(world))
        assert f"{case_id} profiler traces: {Path(traces[0]).parent}/{{{listed}}}" in done.stdout
        acc = EventAccumulator(str(tmp_path / "tb" / run_dir.name / case_id))
        acc.Reload()
        assert len(acc.Scalars("loss")) == 4 and len(acc.Scalars("efficiency")) == 1
        assert {f"peak_memory_mib/rank{r}" for r in range(world)} <= set(acc.Tags()["scalars"])
    assert f"tensorboard --logdir {tmp_path / 'tb'}" in done.stdout
