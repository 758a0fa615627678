"""DeepSpeed ZeRO and Lightning Fabric strategies: readable skip reasons where Lightning refuses CPU, and
real 1x2 jobs that agree with a single process (the fabric-ddp vs ddp parity gate: tests/test_parity.py).
DeepSpeed needs ~10 s to start a job, so each strategy runs exactly once."""

from __future__ import annotations

import pytest

from scalegate import strategies
from scalegate.checks import agreement, tolerances
from scalegate.contract import cards
from scalegate.contract.spec import CaseSpec
from scalegate.contract.topology import Topology
from scalegate.launch import run_case
from scalegate.plan import availability

FP32 = tolerances.for_dtype("fp32")
CNN_PARAMETERS = 8


def reason(name: str, topology: str = "1x2", device: str = "cpu", devices_per_node: int = 0) -> str | None:
    return availability.strategy_unavailable(cards.card(name), Topology.parse(topology), device, devices_per_node)


def small_spec(strategy: str, **changes) -> CaseSpec:
    # one checked step + one more untimed step, two measured: correctness, not speed
    given = dict(strategy=strategy, model="cnn", preset="tiny", topology="1x2", micro_batch=8, steps=2, warmup=2)
    return CaseSpec.of(**{**given, "timeout_s": 240, **changes})


def assert_agrees(result) -> None:
    assert agreement.agreement(result) is None, agreement.agreement(result)
    for rank in result.ranks:
        for kind, bound in (("grads", FP32.grad_rel), ("params", FP32.param_rel)):
            report = rank.grad_check[kind]
            assert not report["missing"] and not report["extra"], (kind, report["missing"], report["extra"])
            assert len(report["errors"]) == CNN_PARAMETERS  # every parameter, under the reference's names
            assert report["errors"][report["worst"]]["rel"] <= bound, (kind, rank.rank, report["worst"])


# --- skip reasons -----------------------------------------------------------------------------------
LIGHTNING_FSDP = (
    "You selected the FSDP strategy but FSDP is only available on GPU. "
    "Set `Fabric(accelerator='gpu', ...)` to continue or select a different strategy."
)
LIGHTNING_DEEPSPEED = "The DeepSpeed strategy is only supported on CUDA GPUs but `CPUAccelerator` is used."


def test_fabric_fsdp_and_deepspeed_skip_on_cpu_with_lightnings_reason():
    assert reason("fabric-fsdp") == f'fabric-fsdp: Lightning refuses CPU: "{LIGHTNING_FSDP}"'
    assert reason("fabric-deepspeed") == f'fabric-deepspeed: Lightning refuses CPU: "{LIGHTNING_DEEPSPEED}"'
    for name in ("fabric-fsdp", "fabric-deepspeed"):
        assert reason(name, "1x2", "cuda", 2) is None
    for name in ("fabric-ddp", "deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3"):
        assert reason(name) is None and reason(name, "1x1") is None


def test_the_quoted_refusals_are_what_lightning_really_says(lightning_refusals):
    # in a child process (tests/conftest.py, with the Trainer's): Fabric.launch() sets distributed variables
    assert lightning_refusals["fabric"] == [LIGHTNING_FSDP, LIGHTNING_DEEPSPEED], lightning_refusals["said"]


def test_deepspeed_config_follows_the_spec():
    from scalegate.strategies.base import RankContext

    ctx = RankContext(rank=0, world_size=2, local_rank=0, local_world_size=2, node_rank=0, device=None)
    zero3 = strategies.get("deepspeed-zero3")(ctx, small_spec("deepspeed-zero3", dtype="bf16", micro_batch=16))
    config = zero3.config()
    assert config["train_micro_batch_size_per_gpu"] == 16 and config["gradient_accumulation_steps"] == 1
    assert config["zero_optimization"] == {"stage": 3} and config["bf16"] == {"enabled": True}
    assert config["zero_allow_untested_optimizer"] is True  # the reference's own torch AdamW
    zero1 = strategies.get("deepspeed-zero1")(ctx, small_spec("deepspeed-zero1"))
    assert zero1.config()["zero_optimization"] == {"stage": 1} and zero1.config()["bf16"] == {"enabled": False}


def test_every_deepspeed_front_end_turns_deepspeeds_default_clipping_off():
    """DeepSpeed clips gradients at norm 1.0 when a config leaves ``gradient_clipping`` out, and Fabric's config
    does: on the first H100 run fabric-deepspeed's parameters were 0.15 apart from the reference's after 3 steps.
    Each front end must train what the reference trains, so each says 0.0. The Lightning objects are built for a
    cuda context (only their configs are read; Lightning refuses CPU, so on CPU the names stay strings)."""
    import torch
    from deepspeed.runtime.constants import GRADIENT_CLIPPING_DEFAULT

    from scalegate.strategies.base import RankContext

    assert GRADIENT_CLIPPING_DEFAULT == 1.0  # the default the configs below must override
    ctx = RankContext(rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0, device=torch.device("cuda"))
    for name in ("deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3"):
        assert strategies.get(name)(ctx, small_spec(name)).config()["gradient_clipping"] == 0.0
    fabric = strategies.get("fabric-deepspeed")(ctx, small_spec("fabric-deepspeed"))._fabric_strategy()
    assert fabric.config["gradient_clipping"] == 0.0 and fabric.config["zero_optimization"]["stage"] == 2
    spec = small_spec("lightning-deepspeed", micro_batch=16)
    trainer = strategies.get("lightning-deepspeed")(ctx, spec)._lightning_strategy()
    assert trainer.config["train_micro_batch_size_per_gpu"] == spec.local_batch  # not read off the loader
    cpu = RankContext(rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0, device=torch.device("cpu"))
    assert strategies.get("fabric-deepspeed")(cpu, small_spec("fabric-deepspeed"))._fabric_strategy() == "deepspeed"


# --- real jobs --------------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3", "fabric-ddp"])
def test_deepspeed_and_fabric_agree_with_a_single_process_on_two_ranks(strategy, tmp_path, agents):
    assert_agrees(run_case(small_spec(strategy), tmp_path / "case", agents=agents))
