"""``--scaling-compile``: a real compiled DDP job agrees with the eager single process; where it does not apply
the case skips with the reason; a compiled run keeps a baseline of its own."""

from __future__ import annotations

import pytest

from scalegate.checks import agreement
from scalegate.contract.spec import CaseSpec
from scalegate.figures.resources import summary
from scalegate.launch import run_case
from scalegate.plan.hostinfo import detect
from scalegate.plan.matrix import skip_reason
from scalegate.record import baselines
from tests.test_convergence import _result  # a result built as the ranks write it


def spec(strategy: str, **fields) -> CaseSpec:
    given = dict(strategy=strategy, model="cnn", preset="tiny", topology="1x2", micro_batch=32, steps=2, warmup=1)
    return CaseSpec.of(**{**given, "compile": True, **fields})


@pytest.mark.slow  # several launches, or one of 15 s or more: the rest tier
def test_a_compiled_ddp_step_computes_what_the_eager_single_process_does(tmp_path, agents):
    result = run_case(spec("ddp"), tmp_path / "case", agents=agents)
    assert agreement.agreement(result) is None and agreement.loss_curve(result) is None
    assert all(r.compile_s and r.compile_s > 0 for r in result.ranks)
    # Dynamo compiled the blocks: with ``block.compile()`` the cnn's nn.Sequential stages compiled no frame at all,
    # on CPU and on the H100, and the "compiled" steps were eager
    assert all(r.extra["compiled_frames"] >= 2 for r in result.ranks), [r.extra for r in result.ranks]
    assert summary(result)["compile_s"] == max(r.compile_s for r in result.ranks)  # reported apart from steps


def test_strategies_with_their_own_engine_skip_compile_with_the_reason():
    reason = skip_reason(spec("deepspeed-zero2"), detect()) or ""
    assert reason.startswith("deepspeed-zero2: --scaling-compile does not apply")
    assert skip_reason(spec("fsdp"), detect()) is None


def test_a_compiled_run_has_a_baseline_key_of_its_own():
    assert baselines.case_key("ddp-cnn-1x2", "tiny") == "ddp-cnn-1x2:tiny"
    assert baselines.case_key("ddp-cnn-1x2", "tiny", compiled=True) == "ddp-cnn-1x2:tiny+compile"


def test_a_compiled_case_keeps_the_gradient_bound_and_gets_a_looser_parameter_bound():
    """Compiled kernels round differently from the eager reference (an H200 without TF32: 7.3e-6 on the resnet's
    gradients, 1.4e-3 on its parameters after 3 AdamW steps); AdamW amplifies that in the parameters only."""
    from scalegate.checks import tolerances

    eager, compiled = tolerances.for_spec(spec("ddp", compile=False)), tolerances.for_spec(spec("ddp"))
    assert eager == tolerances.for_dtype("fp32")
    assert compiled.grad_rel == eager.grad_rel and compiled.loss_rel == eager.loss_rel
    assert compiled.param_rel == tolerances.COMPILED_PARAM_REL["fp32"] > eager.param_rel
    bf16 = tolerances.for_spec(spec("ddp", dtype="bf16"))
    assert bf16 == tolerances.for_dtype("bf16")  # bf16's own parameter bound is already looser


def test_a_compiled_case_whose_blocks_compiled_nothing_fails():
    """The first H100 run: compile_s 0.4 s, yet Dynamo had compiled no frame and the "compiled" steps ran eager."""
    eager = _result([2.3 * 0.9**i for i in range(5)], [2.31], compile=True)
    for rank in eager.ranks:
        rank.extra["compiled_frames"] = 2 if rank.rank == 0 else 0
    assert agreement.compiled(eager) == (
        "torch.compile compiled nothing [ddp-cnn-1x2] rank 1: 0 frames compiled, so its steps ran eager and are no "
        "compiled measurement"
    )
    eager.ranks[1].extra["compiled_frames"] = 2
    assert agreement.compiled(eager) is None
    assert agreement.compiled(_result([2.3] * 5, [2.31])) is None  # not compiled: nothing to prove
