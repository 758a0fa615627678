"""The torch-native strategies: readable skip reasons where they cannot run, and real jobs where
they can, each agreeing with a single process on gradients and parameters (fp32 tolerance)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from scalegate import workloads
from scalegate.checks import agreement, tolerances
from scalegate.contract import cards
from scalegate.contract.errors import SpecError
from scalegate.contract.results import RankResult, aggregate
from scalegate.contract.spec import CaseSpec
from scalegate.contract.topology import Topology
from scalegate.launch import Job, run_case
from scalegate.launch.local import TorchrunLauncher
from scalegate.launch.process import free_port, run
from scalegate.plan import availability
from scalegate.workloads.base import Preset, Workload

FP32 = tolerances.for_dtype("fp32")


def reason(name: str, topology: str, device: str = "cpu", devices_per_node: int = 0) -> str | None:
    return availability.strategy_unavailable(cards.card(name), Topology.parse(topology), device, devices_per_node)


# --- skip reasons ---------------------------------------------------------------------------------
def test_fsdp1_skip_quotes_what_torch_really_says_on_cpu():
    from torch.distributed.fsdp import FullyShardedDataParallel

    from scalegate.contract.cards import FSDP1_REFUSAL as TORCH_REFUSAL

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with pytest.raises(RuntimeError) as refused:
            FullyShardedDataParallel(torch.nn.Linear(2, 2))
    finally:
        dist.destroy_process_group()
    assert str(refused.value) == TORCH_REFUSAL  # the quoted text is torch's own, not a paraphrase
    text = reason("fsdp1", "1x2")
    assert text.startswith("fsdp1 runs on CUDA only") and TORCH_REFUSAL in text
    assert reason("fsdp1", "1x2", "cuda", 2) is None


def test_dp_needs_two_gpus_in_one_process():
    assert (
        reason("dp", "1x1")
        == "dp (nn.DataParallel) needs >= 2 CUDA devices in one process; this node has no CUDA device"
    )
    assert "this node has 1 CUDA device" in reason("dp", "1x1", "cuda", 1)
    assert reason("dp", "1x1", "cuda", 2) is None
    assert "runs at most 1 process(es), topology 1x2 has 2" in reason("dp", "1x2", "cuda", 2)


def test_hsdp_needs_two_nodes():
    assert reason("hsdp", "1x2") == "hsdp needs >= 2 nodes, topology 1x2 has 1"
    assert reason("hsdp", "2x1") is None and reason("hsdp", "2x2") is None


class _NoStages(Workload):
    name = "nostages"
    presets = {"tiny": Preset(micro_batch=1)}
    split_points = ("a", "b", "c", "d", "e")


def test_pipeline_skip_reasons_name_world_size_and_the_workloads_stages():
    assert reason("pipeline-gpipe", "1x1") == "pipeline-gpipe needs a world size >= 2, topology 1x1 has 1"
    gpipe = cards.card("pipeline-1f1b")
    cnn = workloads.get("cnn")
    assert availability.workload_unavailable(gpipe, cnn, Topology.parse("1x2")) is None
    assert availability.workload_unavailable(gpipe, cnn, Topology.parse("1x4")) == (
        "pipeline-1f1b: workload 'cnn' can be cut into at most 2 stages (1 split point(s)), topology 1x4 has 4 ranks"
    )
    assert "does not implement pipeline_stages()" in availability.workload_unavailable(
        gpipe, _NoStages, Topology.parse("1x2")
    )


def test_pipeline_cuts_spread_evenly_and_refuse_too_many_stages():
    workload = _NoStages("tiny", 0)
    assert workload.pipeline_cuts(1) == ()
    assert workload.pipeline_cuts(2) == ("c",)
    assert workload.pipeline_cuts(3) == ("b", "d")
    assert workload.pipeline_cuts(6) == ("a", "b", "c", "d", "e")
    with pytest.raises(SpecError, match="at most 6 pipeline stages, not 7"):
        workload.pipeline_cuts(7)


def test_cnn_stages_chain_to_the_whole_model_and_share_its_parameters():
    workload = workloads.get("cnn")("tiny", 0)
    model = workload.build_model()
    stages = workload.pipeline_stages(model, 2)
    x = torch.randn(3, 1, 28, 28)
    torch.testing.assert_close(stages[1](stages[0](x)), model(x), rtol=0, atol=0)
    ids = {id(p) for p in model.parameters()}
    assert {id(p) for stage in stages for p in stage.parameters()} == ids


def test_pipeline_stage_wrapper_sends_contiguous_outputs_and_input_gradients():
    from scalegate.strategies.pipeline import _Contiguous

    class Transposing(torch.nn.Module):  # like a batch-first LSTM: strided output and input gradient
        def forward(self, x):
            return x.transpose(0, 1)[:, -1]

    x = torch.randn(3, 4, 5, requires_grad=True)
    out = _Contiguous(Transposing())(x)
    assert out.is_contiguous()
    (grad,) = torch.autograd.grad(out, x, torch.ones_like(out))
    assert grad.is_contiguous()
    (plain,) = torch.autograd.grad(Transposing()(x), x, torch.ones_like(out))
    assert not plain.is_contiguous()  # what gloo's send/recv would refuse
    torch.testing.assert_close(grad, plain, rtol=0, atol=0)


# --- real jobs --------------------------------------------------------------------------------------
def small_spec(strategy: str, topology: str) -> CaseSpec:
    # micro-batch 8, one checked step + one more untimed step, one measured: correctness, not speed
    return CaseSpec.of(
        strategy=strategy,
        model="cnn",
        preset="tiny",
        topology=topology,
        micro_batch=8,
        steps=1,
        warmup=2,
        timeout_s=120,
    )


def assert_agrees(result) -> None:
    assert agreement.agreement(result) is None
    for rank in result.ranks:
        for kind, bound in (("grads", FP32.grad_rel), ("params", FP32.param_rel)):
            report = rank.grad_check[kind]
            assert not report["missing"] and not report["extra"]
            assert len(report["errors"]) == 8  # every CNN parameter, keyed by the reference's names
            assert report["errors"][report["worst"]]["rel"] <= bound, (kind, rank.rank, report["worst"])


@pytest.mark.parametrize("strategy", ["fsdp", "zero1-torch", "pipeline-gpipe", "pipeline-1f1b"])
def test_strategy_agrees_with_a_single_process_on_two_ranks(strategy, tmp_path, agents):
    result = run_case(small_spec(strategy, "1x2"), tmp_path / "case", agents=agents)
    assert_agrees(result)
    if strategy.startswith("pipeline"):  # only the last stage computes (and reports) the loss
        assert [r.loss_weight for r in result.ranks] == [0.0, 1.0]
        assert all(v != v for v in result.ranks[0].losses) and all(v == v for v in result.losses)


def test_hsdp_on_two_nodes_of_one_rank_agrees_with_a_single_process(tmp_path):
    spec = small_spec("hsdp", "2x1")
    spec_path, out = spec.write(tmp_path / "spec.json"), tmp_path / "ranks"
    launcher, port = TorchrunLauncher(), free_port()

    def agent(node_rank: int):
        job = Job(
            spec=spec,
            spec_path=spec_path,
            out_dir=out,
            log_dir=tmp_path / f"logs{node_rank}",
            port=port,
            node_rank=node_rank,
        )
        argv = launcher.command(job)
        return run(
            argv,
            log_path=tmp_path / f"agent{node_rank}.log",
            timeout_s=spec.execution.timeout_s,
            env=launcher.environment(spec),
        )

    with ThreadPoolExecutor(2) as pool:  # two torchrun agents on loopback, as two nodes would run
        done = list(pool.map(agent, (0, 1)))
    logs = "\n".join(Path(tmp_path / f"agent{n}.log").read_text()[-2000:] for n in (0, 1))
    assert [d.returncode for d in done] == [0, 0], logs
    result = aggregate(spec, [RankResult.read(out / f"rank{r}.json") for r in range(2)])
    assert_agrees(result)
    assert [r.node_rank for r in result.ranks] == [0, 1]
