"""The self-check that fails a script case whose ranks trained alone (harness/scalegate/checks/script.py
``measurement``): no process group of the job's size in the window, or on CPU (almost) no bytes sent a step.

Built as the ranks write their results; the real launch of the fault (the zoo's Accelerate script without
``cpu=True``: a process group, and still every process trains alone) is tests/test_zoo.py's default-tier test.
"""

from __future__ import annotations

from scalegate.checks import script as script_checks
from scalegate.contract.results import RankResult, aggregate
from scalegate.contract.script import ScriptSpec
from scalegate.contract.spec import CaseSpec

DDP_WIRE = {"source": "netns:lo", "bytes_per_step": 3_203_197, "steps": 5}


def _result(topology: str = "1x2", group: int | None = 2, wire: dict | None = None, device: str = "cpu"):
    world = int(topology.split("x")[1])
    spec = CaseSpec.of(
        strategy="ddp",
        model="train",
        preset="script",
        topology=topology,
        micro_batch=8,
        steps=5,
        warmup=2,
        script=ScriptSpec(path="/r/train.py", argv=(), cwd="/r"),
    )
    ranks = [
        RankResult(
            rank=r,
            world_size=world,
            node_rank=0,
            host="h",
            device=device,
            step_times_s=[0.02] * 5,
            losses=[],
            warmup_losses=[],
            loss_weight=0.0,
            wire=DDP_WIRE if wire is None else wire,
            extra={"script": True, "steps_marked_by": "optimizer.step()", "process_group_size": group},
        )
        for r in range(world)
    ]
    return aggregate(spec, ranks)


def test_ranks_in_one_group_that_exchange_gradients_pass():
    assert script_checks.measurement(_result()) == []


def test_a_script_without_a_process_group_fails_naming_the_rank_and_the_fix():
    [found] = script_checks.measurement(_result(group=1))
    assert found.startswith(
        "rank 0 of 2 trained alone: its script had no process group when the measured window opened"
    ), found
    assert "[ddp-train-1x2] HINT: let the script join the job's process group" in found
    assert "Accelerator(cpu=True)" in found


def test_ranks_in_a_group_that_sent_nothing_a_step_fail_on_cpu():
    """Accelerate without cpu=True under torchrun on CPU: a group of 2, DistributedType.NO, 0-9 bytes a step."""
    [found] = script_checks.measurement(_result(wire={"source": "netns:lo", "bytes_per_step": 9}))
    assert found.startswith("the 2 ranks trained alone: they sent 9 bytes a step between them (netns:lo)"), found


def test_the_bytes_are_not_judged_where_they_are_not_the_jobs_traffic():
    """On a GPU, NCCL within a node goes over NVLink or shared memory, not a network interface; an unmeasured wire
    says nothing; one process has nothing to exchange."""
    quiet = {"source": "netns:lo", "bytes_per_step": 0}
    assert script_checks.measurement(_result(wire=quiet, device="cuda:0")) == []
    assert script_checks.measurement(_result(wire={"source": "unavailable", "unavailable": "no namespace"})) == []
    assert script_checks.measurement(_result(topology="1x1", group=1, wire=quiet)) == []
    assert script_checks.measurement(_result(group=None, wire=DDP_WIRE)) == []  # a rank from before the field
