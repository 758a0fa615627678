"""The convergence gates catch a run that does not learn: the workloads' (harness/scalegate/checks/agreement.py) and a
training script's loss checks (harness/scalegate/checks/script.py), on results built as the ranks write them."""

from __future__ import annotations

import math

from scalegate.checks import agreement
from scalegate.checks import script as script_checks
from scalegate.contract.results import RankResult, aggregate
from scalegate.contract.script import ScriptSpec
from scalegate.contract.spec import CaseSpec


def _result(losses: list[float], warmup: list[float], script: ScriptSpec | None = None, curve=None, **spec_fields):
    spec = CaseSpec(
        strategy="ddp",
        model="cnn",
        preset="tiny",
        topology="1x2",
        micro_batch=8,
        steps=len(losses),
        warmup=len(warmup),
        script=script,
        **spec_fields,
    )
    ranks = [
        RankResult(
            rank=r,
            world_size=2,
            node_rank=0,
            host="h",
            device="cpu",
            step_times_s=[0.01] * len(losses),
            losses=losses,
            warmup_losses=warmup,
            loss_weight=0.5,
            extra={"loss_curve": curve or []} if r == 0 else {},
        )
        for r in range(2)
    ]
    return aggregate(spec, ranks)


def test_a_workload_whose_loss_stays_flat_fails_convergence():
    flat = _result([2.30] * 20, [2.31] * 5)
    assert agreement.convergence(flat, 0.9) == (
        "loss did not converge [ddp-cnn-1x2]: 2.3 after 21 steps is above 90% of its start 2.31"
    )
    assert agreement.convergence(_result([2.3 * 0.9**i for i in range(20)], [2.31] * 5), 0.9) is None


def test_a_workload_whose_loss_turns_nan_fails_naming_the_step():
    nan = _result([2.0, 1.5, math.nan] + [1.0] * 17, [2.31] * 5)
    assert agreement.convergence(nan).startswith("loss is not finite at step 3 [ddp-cnn-1x2]")


SCRIPT = ScriptSpec(path="/r/train.py", argv=(), cwd="/r", loss_pattern=r"loss ([0-9.]+)")


def test_a_scripts_flat_loss_fails_and_a_falling_one_passes():
    flat = _result([math.nan] * 5, [], SCRIPT, curve=[[i, 2.3] for i in range(12)])
    problems, notes = script_checks.problems(flat, None)
    assert problems == [
        "the script's loss did not fall: 2.3 over its first 3 reading(s), 2.3 over its last 3 [ddp-cnn-1x2]"
    ]
    assert script_checks.AGREEMENT_NA in notes
    falling = _result([math.nan] * 5, [], SCRIPT, curve=[[i, 2.3 * 0.8**i] for i in range(12)])
    assert script_checks.problems(falling, None)[0] == []


def test_a_scripts_nan_loss_and_a_strong_curve_that_leaves_the_1x1_run_fail():
    nan = _result([math.nan] * 5, [], SCRIPT, curve=[[0, 2.3], [1, math.nan], [2, 1.0], [3, 0.9]])
    assert script_checks.problems(nan, None)[0] == ["the script's loss is nan at step 1 [ddp-cnn-1x2]"]
    strong = dict(scaling="strong", global_batch=16)
    one = _result([math.nan] * 5, [], SCRIPT, curve=[[i, 2.0 - 0.1 * i] for i in range(8)], **strong)
    apart = _result([math.nan] * 5, [], SCRIPT, curve=[[i, 2.0 - 0.05 * i] for i in range(8)], **strong)
    reference = aggregate(
        apart.spec.replace(topology="1x1"), [r.__class__(**{**r.__dict__, "world_size": 1}) for r in one.ranks[:1]]
    )
    problems, _ = script_checks.problems(apart, reference)
    assert len(problems) == 1 and "leaves the 1x1 run's: at step 7 1.65 vs 1.3" in problems[0]
    assert "loss_tolerance 5% with the same global batch" in problems[0]
