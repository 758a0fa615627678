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
    spec = CaseSpec.of(
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
        "loss did not converge [ddp-cnn-1x2]: 2.3 after 21 steps is above 90% of its start 2.31 (the bar is "
        "Preset(convergence_fraction=...), 0.9 here; a workload of your own that learns at its own pace leaves it "
        "None, the default, and its loss must only fall: docs/your-model.md)"
    )
    assert agreement.convergence(_result([2.3 * 0.9**i for i in range(20)], [2.31] * 5), 0.9) is None


def test_a_workload_whose_loss_turns_nan_fails_naming_the_step():
    nan = _result([2.0, 1.5, math.nan] + [1.0] * 17, [2.31] * 5)
    assert agreement.convergence(nan).startswith("loss is not finite at step 3 [ddp-cnn-1x2]")
    assert agreement.convergence(nan, None).startswith("loss is not finite at step 3 [ddp-cnn-1x2]")


# A Conv-BatchNorm CNN on data of its own (tests/assets/own_pace_models.py OwnCNN), measured on ddp 1x2 (its loss at
# the start and after each of 20 steps): a correct run that learns at its own pace, which a 70% bar would fail
SLOW = [2.29, 2.291, 2.261, 2.386, 2.239, 2.359, 2.306, 2.306, 2.224, 2.274, 2.243, 2.239, 2.255, 2.257, 2.236]
SLOW += [2.261, 2.262, 2.227, 2.187, 2.165, 2.192]


def test_a_workload_of_your_own_learning_at_its_own_pace_passes_the_default_and_fails_a_fraction():
    slow = _result(SLOW[1:], SLOW[:1] * 5)
    assert agreement.convergence(slow, None) is None  # Preset(convergence_fraction=None), the default
    assert agreement.convergence(slow, 0.7).startswith(
        "loss did not converge [ddp-cnn-1x2]: 2.165 after 21 steps is above 70% of its start 2.29 (the bar is "
        "Preset(convergence_fraction=...), 0.7 here"
    )


def test_the_default_fails_a_flat_a_noisy_flat_a_rising_and_a_nan_loss_naming_the_knob():
    flat = agreement.convergence(_result([2.30] * 20, [2.30] * 5), None)
    assert flat == (
        "loss did not fall [ddp-cnn-1x2]: a trend of +0 over its 21 steps from 2.3 (least squares): flat, where a fall "
        "of 2 standard errors is needed, and not below 70% of its start (the bar of a workload of your own, "
        "Preset(convergence_fraction=None), the default; a number between 0 and 1 asks the loss to fall below that "
        "fraction of its start instead: docs/your-model.md)"
    )
    # a CNN that cannot learn its data (tests/assets/own_pace_models.py BlindCNN): batch-to-batch noise around ln 10,
    # whose last quarter's median (2.294) is below its first quarter's (2.321): a script's test would pass it
    noisy = [2.259, 2.444, 2.321, 2.364, 2.429, 2.397, 2.384, 2.259, 2.287, 2.292, 2.376, 2.315, 2.359, 2.339, 2.331]
    noisy += [2.278, 2.294, 2.258, 2.32, 2.294]
    assert agreement.convergence(_result(noisy, [2.266] * 5), None).startswith(
        "loss did not fall [ddp-cnn-1x2]: a trend of -0.0509 over its 21 steps from 2.266 (least squares): 1.3 "
        "standard errors below flat, where a fall of 2 standard errors is needed"
    )
    rising = agreement.convergence(_result([2.3 + 0.05 * i for i in range(20)], [2.3] * 5), None)
    assert rising.startswith("loss did not fall [ddp-cnn-1x2]: a trend of +0.987 over its 21 steps from 2.3")
    assert "standard errors above flat" in rising
    assert agreement.convergence(_result([2.3] * 5 + [math.inf] * 15, [2.3] * 5), None).startswith(
        "loss is not finite at step 6"
    )


def test_a_fast_learner_at_its_floor_from_the_first_quarter_on_passes_the_default():
    fast = [0.4, 0.05, 0.02] + [0.02 + 0.01 * (i % 3) for i in range(17)]
    assert agreement.convergence(_result(fast, [2.3] * 5), None) is None


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


def test_a_scripts_loss_at_its_printed_floor_from_the_first_quarter_on_passes():
    """The example script prints its loss to 4 decimals: run for 600 steps it reads 0.0000 from about step 60 on,
    so both quarters' medians are 0; it fell (from its first reading) and has nothing left to fall."""
    learned = _result([math.nan] * 5, [], SCRIPT, curve=[[i, max(0.0, 2.3 - 0.5 * i)] for i in range(100)])
    assert script_checks.problems(learned, None)[0] == []
    stuck = _result([math.nan] * 5, [], SCRIPT, curve=[[i, 0.0] for i in range(100)])  # never above its floor
    assert script_checks.problems(stuck, None)[0][0].startswith("the script's loss did not fall: 0 over its first 25")


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


def test_the_bar_is_the_presets_else_the_built_ins_70_percent_else_a_fall_for_your_own_workload():
    from scalegate import workloads
    from scalegate.workloads.base import Preset, Workload, convergence_fraction

    cnn = workloads.get("cnn")
    assert convergence_fraction(cnn, cnn.presets["tiny"]) == workloads.OWN_CONVERGENCE_FRACTION == 0.7

    class Mine(Workload):  # a workload of your own: its module is not scalegate's
        name = "mine"
        presets = {"tiny": Preset(micro_batch=8), "strict": Preset(micro_batch=8, convergence_fraction=0.8)}

    assert convergence_fraction(Mine, Mine.presets["tiny"]) is None
    assert convergence_fraction(Mine, Mine.presets["strict"]) == 0.8


def test_a_convergence_fraction_that_is_no_fraction_is_refused_with_the_fix():
    import pytest

    from scalegate.contract.errors import SpecError
    from scalegate.workloads.base import Preset

    for bad in (0, 1.2, "0.7"):
        with pytest.raises(SpecError, match=r"(?s)is not a fraction of the loss.s start.*HINT: give a number between"):
            Preset(micro_batch=8, convergence_fraction=bad)
