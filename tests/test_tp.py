"""Tensor parallelism and 2-D FSDP x TP on the decoder LM ``gpt``: dims validation, skips, and real jobs.

Real two-rank (``tp``) and four-rank on two emulated nodes (``fsdp-tp``) launches on gloo: gradients and
parameters against a single process, the 1/tp promise on the TP-sharded weights, and bytes on the wire
against the activation volume the strategy predicts.
"""

from __future__ import annotations

import dataclasses

import pytest

from scalegate.checks import agreement, sharding
from scalegate.contract.errors import SpecError
from scalegate.contract.parallel_dims import ParallelDims
from scalegate.contract.spec import CaseSpec
from scalegate.contract.topology import Topology
from scalegate.figures.resources import wire
from scalegate.launch import Settings, run_case
from scalegate.launch.emulated import EmulatedLauncher
from scalegate.plan.hostinfo import detect
from scalegate.plan.matrix import skip_reason


def gpt(strategy: str, topology: str = "1x2", **fields) -> CaseSpec:
    return CaseSpec.of(
        strategy=strategy, model="gpt", preset="tiny", topology=topology, micro_batch=8, steps=3, warmup=2, **fields
    )


def test_parallel_dims_name_every_factor():
    assert ParallelDims.of(Topology.parse("2x4")) == ParallelDims(dp=2, tp=4, world_size=8)
    with pytest.raises(SpecError, match=r"dp 2 x tp 2 = 4 is not the world size 6"):
        ParallelDims(dp=2, tp=2, world_size=6)
    with pytest.raises(SpecError, match=r"heads 6 % tp 4 = 2, ffn 6 % tp 4 = 2") as err:
        ParallelDims(dp=1, tp=4, world_size=4).check_divides({"heads": 6, "dim": 64, "ffn": 6}, "gpt")
    assert "ranks per node divide" in err.value.hint


@pytest.mark.parametrize(
    "spec, reason",
    [
        (gpt("tp", "2x2"), "tp group is one node's ranks; 2x2 has 2 nodes: use fsdp-tp"),
        (gpt("fsdp-tp", "1x2"), "fsdp-tp needs >= 2 nodes"),
        (gpt("tp", dims={"heads": 3, "dim": 96}), "tp: model gpt does not split over tp=2: heads 3 % tp 2 = 1"),
        (
            CaseSpec.of(strategy="tp", model="cnn", preset="tiny", topology="1x2", micro_batch=32),
            "tp: workload 'cnn' has no tensor_parallel_plan()",
        ),
    ],
)
def test_cases_that_cannot_be_split_skip_with_the_reason(spec, reason):
    assert reason in (skip_reason(spec, detect()) or "")


def test_tp_trains_the_single_process_model_on_half_the_weights_and_predicts_its_bytes(tmp_path, agents):
    result = run_case(gpt("tp"), tmp_path / "case", agents=agents)
    assert agreement.agreement(result) is None and agreement.loss_curve(result) is None
    assert sharding.check(result) is None
    for rank in result.ranks:
        found = rank.extra["tp"]
        assert found["held"]["params"] == found["full_params_bytes"] // 2  # the 1/tp promise, exactly
    sent = wire(result)
    if sent["bytes_per_step"] is not None:  # a private namespace counts the job's loopback bytes
        assert sent["measured_over_analytic"] == pytest.approx(1.0, abs=0.05)


def test_a_broken_tp_promise_is_named_with_its_bytes(tmp_path, agents):
    result = run_case(gpt("tp", tp_sequence_parallel=True), tmp_path / "case", agents=agents)
    assert agreement.agreement(result) is None  # sequence parallelism computes the same gradients
    first = result.ranks[0]
    found = first.extra["tp"]
    unsharded = {**found, "held": {k: v * 2 for k, v in found["held"].items()}}  # as if the plan split nothing
    broken = dataclasses.replace(
        result, ranks=[dataclasses.replace(first, extra={**first.extra, "tp": unsharded}), *result.ranks[1:]]
    )
    problem = sharding.check(broken) or ""
    assert "params of the tensor-parallel weights not sharded [tp tp-gpt-1x2] rank 0" in problem
    assert "expected 1/2" in problem


@pytest.mark.slow  # several launches, or one of 15 s or more: the rest tier
def test_fsdp_on_top_of_tp_across_two_emulated_nodes_agrees_and_shards_a_quarter(tmp_path):
    result = EmulatedLauncher(Settings(link_rate="1gbit")).run(gpt("fsdp-tp", "2x2"), tmp_path / "case")
    assert agreement.agreement(result) is None and agreement.loss_curve(result) is None
    assert sharding.check(result) is None
    assert all(r.extra["tp"]["held"]["params"] == r.extra["tp"]["full_params_bytes"] // 4 for r in result.ranks)
