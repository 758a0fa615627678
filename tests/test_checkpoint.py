"""``--scaling-checkpoint``: real launches save and load checkpoints, resume, and catch a broken resume.

Each launch is a real two-rank torchrun job (``scalegate.launch.run_case``), two measured steps after one warm-up
step, then the checkpoint window (harness/scalegate/measure/checkpoint.py). No timing is asserted (shared 2-core hosts): only
that times and bytes are there and the round trip is exact.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from scalegate.checks import agreement, tolerances
from scalegate.contract.faults import Faults
from scalegate.contract.spec import CaseSpec
from scalegate.figures import resources
from scalegate.judge import budgets
from scalegate.judge import metric as V
from scalegate.judge.evidence import CaseRecord, LaunchRecord
from scalegate.launch import run_case
from scalegate.measure import checkpoint, gradcheck
from scalegate.record import update
from scalegate.record.baselines import BaselineFile
from scalegate.report import table


def spec(strategy: str, directory, **changes) -> CaseSpec:
    return CaseSpec.of(
        strategy=strategy,
        model="cnn",
        preset="tiny",
        topology="1x2",
        micro_batch=32,
        steps=2,
        warmup=1,
        checkpoint=True,
        checkpoint_dir=str(directory),
        **changes,
    )


@pytest.mark.parametrize(
    "strategy, fmt",
    [
        ("ddp", "torch.distributed.checkpoint"),
        ("fsdp", "torch.distributed.checkpoint"),
        pytest.param("deepspeed-zero3", "deepspeed", marks=pytest.mark.slow),  # a DeepSpeed engine a side: 25 s
    ],
)
def test_a_checkpoint_round_trip_is_timed_measured_and_exact(tmp_path, strategy, fmt, agents):
    if strategy.startswith("deepspeed"):
        pytest.importorskip("deepspeed")
    directory = tmp_path / "case" / "checkpoint"
    keep = strategy == "fsdp"  # its files are loaded again below, by one process (2 -> 1)
    result = run_case(spec(strategy, directory, checkpoint_keep=keep), tmp_path / "case", agents=agents)
    assert agreement.checkpoint(result) is None
    for rank in result.ranks:
        found = rank.extra["checkpoint"]
        assert found["format"] == fmt and found["save_s"] > 0 and found["load_s"] > 0 and found["bytes"] > 0
        assert found["loss_resumed"] == found["loss_uninterrupted"]  # bitwise on CPU
        assert found["params"]["missing"] == [] and found["params"]["error"]["abs"] == 0.0
        assert len(rank.step_times_s) == 2  # the window adds no measured step
    assert directory.exists() == keep  # removed after the window unless checkpoint_keep
    figures = resources.summary(result)["checkpoint"]
    assert figures["bytes"] == sum(figures["bytes_per_rank"]) and figures["s_per_gb"] > 0
    if strategy != "ddp":  # sharded state: each rank writes its own shards, about half of the whole
        low, high = sorted(figures["bytes_per_rank"])
        assert high < 0.8 * figures["bytes"], figures
    case = {
        "case_id": result.spec.case_id,
        "status": "ok",
        "spec": result.spec.to_dict(),
        "result": result.to_dict(),
        "resources": resources.summary(result),
    }
    row = dict(zip(table.header([case]), table.rows([case])[0]))
    assert row["ckpt s/GB"] == f"{figures['s_per_gb']:.3g}" and row["verdict"] == "ok"
    if keep:  # 2 -> 1: the same step resumed by one process, within the agreement tolerance (another reduction order)
        loss, params = resume_in_one_process(directory, result.spec)
        two_rank_loss = sum(r.extra["checkpoint"]["loss_uninterrupted"] for r in result.ranks) / 2
        tol = tolerances.for_dtype("fp32")
        assert abs(loss - two_rank_loss) / two_rank_loss <= tol.loss_rel
        compared = gradcheck.compare(params, torch.load(directory / checkpoint.UNINTERRUPTED)["params"])
        assert compared["missing"] == [] and compared["errors"][compared["worst"]]["rel"] <= tol.param_rel


def test_a_resume_without_the_optimizer_state_fails_the_case_naming_the_parameter(tmp_path, agents):
    faulty = spec("ddp", tmp_path / "case" / "checkpoint", faults=Faults(checkpoint_skip_optimizer=True))
    result = run_case(faulty, tmp_path / "case", agents=agents)
    problem = agreement.checkpoint(result)
    assert problem is not None and problem.startswith("checkpoint round trip failed [ddp ddp-cnn-1x2] rank 0:")
    assert "worst parameter '" in problem and "tolerance 1e-05" in problem, problem
    # the loss of the resumed step is computed before its optimizer update: the model itself came back right
    found = result.ranks[0].extra["checkpoint"]
    assert found["loss_resumed"] == found["loss_uninterrupted"] and found["params"]["error"]["rel"] > 1e-5


def test_checkpoint_files_are_attributed_to_the_rank_that_wrote_them(tmp_path):
    names = {
        "__0_0.distcp": 10,
        "__1_0.distcp": 20,
        ".metadata": 3,
        "scalegate/zero_pp_rank_1_mp_rank_00_optim_states.pt": 40,
        "scalegate/mp_rank_00_model_states.pt": 5,
        "latest": 1,
    }
    for name, size in names.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x" * size)
    assert checkpoint.bytes_written(tmp_path, 0) == 10 + 3 + 5 + 1
    assert checkpoint.bytes_written(tmp_path, 1) == 20 + 40


def _record(per_gb):
    return CaseRecord(
        case_id="ddp-cnn-1x2",
        key="ddp-cnn-1x2:tiny",
        profile="p",
        world_size=2,
        global_batch=64,
        steps=2,
        warmup=1,
        launches=(LaunchRecord(step_times_s=(0.1, 0.1), checkpoint_s_per_gb=per_gb),),
    )


def test_checkpoint_seconds_per_gb_is_a_budget_with_a_generous_tolerance():
    case = {
        "case_id": "ddp-cnn-1x2",
        "key": "ddp-cnn-1x2:tiny",
        "status": "ok",
        "spec": {"steps": 2, "warmup": 1},
        "result": {"ranks": [{"peak_memory_bytes": 1}], "throughput": 1.0, "losses": [1.0], "median_step_s": 0.1},
        "resources": {"checkpoint": {"s_per_gb": 12.5, "format": "torch.distributed.checkpoint"}},
    }
    entry = update.entries_from_run([case], 0.1)[0]["ddp-cnn-1x2:tiny"]["checkpoint_s_per_gb"]
    assert entry == {
        "value": 12.5,
        "tolerance": update.CHECKPOINT_TOLERANCE,
        "unit": "s/GB",
        "format": "torch.distributed.checkpoint",
    }
    baseline = BaselineFile(
        path=None, profile="p", fingerprint={}, cases={"ddp-cnn-1x2:tiny": {"checkpoint_s_per_gb": entry}}
    )
    within = budgets.checkpoint(_record(20.0), _record(20.0).launches[0], baseline)
    assert [v.status for v in within] == [V.OK]
    slower = budgets.checkpoint(_record(30.0), _record(30.0).launches[0], baseline)[0]
    assert slower.status == V.REGRESSED
    assert slower.message == (
        "checkpoint save + load 30 s/GB is above baseline 12.5 s/GB (tolerance 100%) [ddp-cnn-1x2:tiny on p]"
    )
    assert budgets.checkpoint(_record(None), _record(None).launches[0], baseline) == []


def test_a_strategy_that_cannot_checkpoint_reports_why_and_the_table_says_n_a():
    from scalegate.strategies import get

    class Stub:
        checkpoint_unavailable = get("pipeline-gpipe").checkpoint_unavailable

    found = checkpoint.run_window(spec("pipeline-gpipe", "/nonexistent"), 0, Stub(), lambda i: 0.0, 0, lambda: None)
    assert (
        found == {"checkpoint": {"unavailable": Stub.checkpoint_unavailable}}
        and "pipeline" in Stub.checkpoint_unavailable
    )
    case = {
        "case_id": "pipeline-gpipe-cnn-1x2",
        "status": "ok",
        "spec": {},
        "result": None,
        "resources": {"checkpoint": {"unavailable": Stub.checkpoint_unavailable}},
    }
    assert table.rows([case])[0][table.header([case]).index("ckpt s/GB")] == "n/a"
    assert table.header([{"case_id": "x", "status": "ok"}]) == table.HEADER  # no column without the option


def resume_in_one_process(directory, two: CaseSpec) -> tuple[float, dict]:
    """An FSDP 1x2 checkpoint (each rank's shards) loaded by one plain process, no process group: DCP reshards on
    load. Returns the loss and parameters of the step resumed on the whole global batch."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    from scalegate import workloads
    from scalegate.worker.reference import make_optimizer_factory

    kept = torch.load(directory / checkpoint.UNINTERRUPTED)
    workload = workloads.resolve(two)(two.preset, two.run.seed, None, dims=two.dims)
    torch.manual_seed(1)  # other initial weights: the load must replace every one
    model = workload.build_model()
    optimizer = make_optimizer_factory(two)(model.parameters())
    msd, osd = get_state_dict(model, optimizer)
    dcp.load({"model": msd, "optim": osd}, checkpoint_id=str(directory))
    set_state_dict(model, optimizer, model_state_dict=msd, optim_state_dict=osd)
    inputs, targets = workload.global_batch(kept["batch"], two.global_batch_size)
    loss = workload.loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
    return float(loss.detach()), {n: p.detach() for n, p in model.named_parameters()}


def _resume_on_rank(rank: int, directory: str, port: int, out: str) -> None:
    """One of two spawned ranks: FSDP2 over gloo, the 1x1 checkpoint loaded through the strategy's own
    load_checkpoint, the kept step taken on this rank's half of the same global batch."""
    import json

    import torch.distributed as dist

    from scalegate import strategies, workloads
    from scalegate.worker.loop import rank_context
    from scalegate.worker.reference import make_optimizer_factory

    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE="2",
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE="2",
    )
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        two = CaseSpec.of(
            strategy="fsdp", model="cnn", preset="tiny", topology="1x2", micro_batch=16, steps=2, warmup=1
        )
        kept = torch.load(f"{directory}/{checkpoint.UNINTERRUPTED}")
        workload = workloads.resolve(two)(two.preset, two.run.seed, None, dims=two.dims)
        torch.manual_seed(1)  # other initial weights: the load must replace every one
        strategy = strategies.get("fsdp")(rank_context(two), two, workload=workload)
        strategy.setup(workload.build_model(), make_optimizer_factory(two))
        strategy.load_checkpoint(directory)
        inputs, targets = workload.global_batch(kept["batch"], two.global_batch_size)
        loss = strategy.forward_backward(*strategy.shard(inputs, targets), workload.loss)
        strategy.optimizer_step()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        compared = gradcheck.compare(strategy.full_parameters(), kept["params"])
        if rank == 0:
            worst = compared["errors"][compared["worst"]]["rel"] if compared["worst"] else None
            Path(out).write_text(json.dumps({"loss": float(loss), "missing": compared["missing"], "rel": worst}))
    finally:
        dist.destroy_process_group()


@pytest.mark.nightly
def test_resume_at_another_world_size_one_rank_to_two(tmp_path, agents):
    """A single-process DCP checkpoint loaded by two FSDP2 ranks (each reads its shards): the step resumed on the
    same global batch, split over the two ranks, matches the single process's uninterrupted step."""
    import json

    import torch.multiprocessing as mp

    from scalegate.launch.process import free_port

    directory = tmp_path / "case" / "checkpoint"
    one = CaseSpec.of(
        strategy="single",
        model="cnn",
        preset="tiny",
        topology="1x1",
        micro_batch=32,
        steps=2,
        warmup=1,
        checkpoint=True,
        checkpoint_dir=str(directory),
        checkpoint_keep=True,
    )
    result = run_case(one, tmp_path / "case", agents=agents)
    assert agreement.checkpoint(result) is None
    out = tmp_path / "resumed.json"
    mp.start_processes(_resume_on_rank, args=(str(directory), free_port(), str(out)), nprocs=2, start_method="spawn")
    resumed = json.loads(out.read_text())
    tol = tolerances.for_dtype("fp32")
    want = result.ranks[0].extra["checkpoint"]["loss_uninterrupted"]
    assert abs(resumed["loss"] - want) / want <= tol.loss_rel, (resumed, want)
    assert resumed["missing"] == [] and resumed["rel"] <= tol.param_rel, resumed


@pytest.mark.slow
@pytest.mark.nightly
def test_the_suite_reports_checkpoint_figures_in_the_table_the_case_json_and_extra_info(suite, tmp_path):
    import json

    done = suite(
        "-k",
        "not parity",
        "--scaling-strategies",
        "ddp",
        "--scaling-models",
        "cnn",
        "--scaling-topologies",
        "1x2",
        "--scaling-steps",
        "3",
        "--scaling-warmup",
        "1",
        "--scaling-local-steps",
        "0",
        "--scaling-checkpoint",
        "--benchmark-json",
        str(tmp_path / "bench.json"),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_dir = next((tmp_path / "results").glob("2*"))
    case = json.loads((run_dir / "ddp-cnn-1x2.json").read_text())
    figures = case["resources"]["checkpoint"]
    assert figures["format"] == "torch.distributed.checkpoint" and figures["s_per_gb"] > 0
    assert len(figures["bytes_per_rank"]) == 2 and not (run_dir / "ddp-cnn-1x2" / "checkpoint").exists()
    assert case["result"]["ranks"][0]["extra"]["checkpoint"]["directory"] == str(
        (run_dir / "ddp-cnn-1x2" / "checkpoint").resolve()
    )
    assert "ckpt s/GB" in done.stdout and f"{figures['s_per_gb']:.3g}" in done.stdout
    bench = json.loads((tmp_path / "bench.json").read_text())["benchmarks"]
    assert next(b for b in bench if "ddp-cnn-1x2" in b["name"])["extra_info"]["checkpoint"] == figures


def test_the_option_reaches_every_case_spec_and_the_session_puts_the_files_in_the_case_directory(tmp_path):
    from scalegate.plan import hostinfo, matrix
    from scalegate.plan.options import from_argv
    from scalegate.session import ScalingSession

    argv = ["--scaling-strategies=ddp", "--scaling-models=cnn", "--scaling-topologies=1x2", "--scaling-steps=2"]
    opts = from_argv([*argv, "--scaling-warmup=1", f"--scaling-results-dir={tmp_path}", "--scaling-checkpoint"])
    host = hostinfo.detect()
    case_spec = matrix.spec_for("ddp", "cnn", "1x2", opts, host)
    assert case_spec.windows.checkpoint and not case_spec.windows.checkpoint_dir  # the session decides where
    session = ScalingSession(options=opts, host=host, run_dir=tmp_path / "run", baseline=None)
    assert session._windows(case_spec).windows.checkpoint_dir == str(
        (tmp_path / "run" / "ddp-cnn-1x2" / "checkpoint").resolve()
    )
    off = matrix.spec_for("ddp", "cnn", "1x2", from_argv(argv), host)
    assert (
        not off.windows.checkpoint and session._windows(off).windows.checkpoint_dir == ""
    )  # off by default: nothing changes


def test_the_history_tracks_checkpoint_seconds_per_gb_lower_is_better():
    from scalegate.history import check, ingest

    case = {"status": "ok", "result": {"ranks": []}, "resources": {"checkpoint": {"s_per_gb": 26.6}}}
    assert ingest.metrics_of(case)["checkpoint_s_per_gb"] == 26.6
    assert "checkpoint_s_per_gb" not in ingest.metrics_of({"status": "ok", "result": {}, "resources": {}})
    assert check.classify("checkpoint_s_per_gb", 0.8, 0.5) == check.REGRESSION  # slower saves are worse
    assert check.fmt("checkpoint_s_per_gb", 26.6) == "26.6 s/GB"


def test_the_resume_fault_is_a_command_line_switch_that_needs_the_option():
    from scalegate.contract.errors import SpecError
    from scalegate.contract.faults import parse_fault
    from scalegate.plan.option_types import faults
    from scalegate.plan.options import _faults

    assert parse_fault("checkpoint-skip-optimizer") == {"checkpoint_skip_optimizer": 1}
    assert Faults(**parse_fault("checkpoint-skip-optimizer")).checkpoint_skip_optimizer is True
    with pytest.raises(SpecError, match="takes no arguments, got 'rank=1'"):
        parse_fault("checkpoint-skip-optimizer:rank=1")
    given = [faults("--scaling-inject-fault")("checkpoint-skip-optimizer")]  # as argparse reads the option
    with pytest.raises(SpecError, match="does nothing without --scaling-checkpoint") as caught:
        _faults(given, checkpoint=False, update_baselines=False)
    assert caught.value.hint == "add --scaling-checkpoint"
    assert _faults(given, checkpoint=True, update_baselines=False) == (("checkpoint_skip_optimizer", 1),)
