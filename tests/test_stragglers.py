"""Straggler attribution: the rank that reaches its first collective last, named in the verdict.

Synthetic rank results for the rules; one real DDP job with a rank that sleeps in its forward.
"""

from __future__ import annotations

import pytest

from scalegate.contract.faults import Faults, parse_fault
from scalegate.contract.results import RankResult, aggregate
from scalegate.contract.spec import CaseSpec
from scalegate.figures import stragglers
from scalegate.launch import run_case
from scalegate.measure.clock import ForwardClock


def spec(strategy: str = "ddp", **fields) -> CaseSpec:
    return CaseSpec.of(
        strategy=strategy, model="cnn", preset="tiny", topology="1x2", micro_batch=32, steps=5, warmup=1, **fields
    )


def rank(i: int, forward: list[float], collectives: bool = False) -> RankResult:
    return RankResult(
        rank=i,
        world_size=2,
        node_rank=0,
        host="h",
        device="cpu",
        step_times_s=[0.05] * 5,
        losses=[1.0] * 5,
        warmup_losses=[1.0],
        loss_weight=0.5,
        forward_s=forward,
        forward_collectives=collectives,
    )


def test_the_rank_last_in_most_steps_is_named_with_its_excess():
    found = stragglers.attribute(
        aggregate(spec(), [rank(0, [0.020] * 5), rank(1, [0.031, 0.030, 0.019, 0.032, 0.030])])
    )
    assert found["rank"] == 1 and found["last_share"] == 0.8
    assert found["message"] == (
        "straggler: rank 1 reaches its first collective 10.0 ms after the others (median "
        "forward 30.0 ms against 20.0 ms; last in 4/5 steps) [ddp-cnn-1x2]"
    )


@pytest.mark.parametrize(
    "forward",
    [
        [0.0205, 0.0203, 0.0204, 0.0206, 0.0205],  # 0.5 ms: within the noise bar
        [0.031, 0.019, 0.032, 0.019, 0.019],  # slow now and then, not the same rank each step
    ],
)
def test_balanced_or_inconsistent_ranks_name_no_one(forward):
    found = stragglers.attribute(aggregate(spec(), [rank(0, [0.020] * 5), rank(1, forward)]))
    assert found["rank"] is None and found["message"] == ""


def test_a_strategy_communicating_in_its_forward_says_why_it_names_no_one():
    found = stragglers.attribute(aggregate(spec("fsdp"), [rank(0, [0.02] * 5, True), rank(1, [0.05] * 5, True)]))
    assert found["rank"] is None and "fsdp communicates inside its forward" in found["why"]


def test_the_straggler_fault_parses_and_sleeps_only_its_rank():
    assert parse_fault("straggler:rank=1,ms=30") == {"straggler_rank": 1, "straggler_ms": 30}
    clock = ForwardClock(rank=0, straggler_rank=1, straggler_ms=30)
    assert clock.sleep_s == 0 and ForwardClock(rank=1, straggler_rank=1, straggler_ms=30).sleep_s == 0.03
    clock.start(0.0)
    assert clock.wrap(lambda out, target: out + target)(1, 2) == 3
    clock.keep(measured=True)
    assert len(clock.times) == 1 and clock.times[0] > 0


@pytest.mark.timing  # the excess it names is the injected sleep, within 25 ms
def test_a_real_rank_sleeping_in_its_forward_is_named(tmp_path, agents):
    result = run_case(spec(faults=Faults(straggler_rank=1, straggler_ms=40)), tmp_path / "case", agents=agents)
    found = stragglers.attribute(result)
    assert found["rank"] == 1, found
    assert found["message"].startswith("straggler: rank 1 reaches its first collective")
    assert found["excess_s"] == pytest.approx(0.040, abs=0.025)  # the injected sleep, give or take the host


def test_the_breakdown_splits_each_ranks_step_into_compute_and_exposed_communication():
    from scalegate.figures import breakdown

    ranks = [
        RankResult(
            rank=i,
            world_size=2,
            node_rank=0,
            host="h",
            device="cpu",
            step_times_s=[0.05] * 5,
            losses=[1.0] * 5,
            warmup_losses=[1.0],
            loss_weight=0.5,
            pair_step_times_s=[0.050] * 4,
            local_step_times_s=[local] * 4,
        )
        for i, local in ((0, 0.030), (1, 0.040))
    ]
    found = breakdown.summary(aggregate(spec(), ranks))
    assert [(r["rank"], r["compute_s"], round(r["exposed_comm_s"], 6)) for r in found["per_rank"]] == [
        (0, 0.030, 0.020),
        (1, 0.040, 0.010),
    ]
    assert found["exposed_share"] == pytest.approx((0.050 - 0.035) / 0.050)  # slowest step, ranks' mean compute


@pytest.mark.slow  # two launches: not the fast tier's single ones
@pytest.mark.timing  # exposed communication, measured in both launches
def test_an_extra_blocking_all_reduce_shows_as_exposed_communication(tmp_path, agents):
    from scalegate.figures import breakdown

    clean = breakdown.summary(run_case(spec(local_steps=8), tmp_path / "clean", agents=agents))
    faulted = breakdown.summary(
        run_case(spec(local_steps=8, faults=Faults(extra_allreduce=8)), tmp_path / "faulted", agents=agents)
    )
    # eight more gradient-sized all-reduces a step: every rank waits longer than any rank of the clean launch
    assert faulted["exposed_share"] > clean["exposed_share"], (clean, faulted)
    assert min(r["exposed_comm_s"] for r in faulted["per_rank"]) > max(r["exposed_comm_s"] for r in clean["per_rank"])
