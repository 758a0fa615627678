"""Gradient and parameter agreement catch injected faults in real two-rank DDP jobs."""

from scalegate.checks import agreement
from scalegate.contract.faults import Faults
from scalegate.contract.spec import CaseSpec
from scalegate.launch import run_case


def ddp_spec(**faults) -> CaseSpec:
    return CaseSpec.of(
        strategy="ddp",
        model="cnn",
        preset="tiny",
        topology="1x2",
        micro_batch=32,
        steps=2,
        warmup=3,
        faults=Faults(**faults),
    )


def test_clean_ddp_agrees_with_a_single_process(tmp_path, agents):
    result = run_case(ddp_spec(), tmp_path / "case", agents=agents)
    assert agreement.agreement(result) is None
    for rank in result.ranks:
        assert rank.grad_check["grads"]["worst"] is not None
        assert rank.grad_check["param_steps"] == 3


def test_scaled_gradient_on_one_rank_is_caught_and_named(tmp_path, agents):
    # A reduction bug on rank 1: its gradients come out 0.1% too large.
    result = run_case(ddp_spec(grad_scale=1.001, grad_scale_rank=1), tmp_path / "case", agents=agents)
    message = agreement.agreement(result)
    assert message is not None
    assert "gradient agreement failed [ddp ddp-cnn-1x2] rank 1: worst parameter" in message
    assert "relative 0.001 > tolerance 2e-05 (fp32)" in message


def test_skipped_update_on_one_rank_is_caught_by_parameter_agreement(tmp_path, agents):
    result = run_case(ddp_spec(skip_step=1, skip_step_rank=0), tmp_path / "case", agents=agents)
    message = agreement.agreement(result)
    assert message is not None
    assert "gradient agreement failed" not in message
    assert "parameter agreement failed [ddp ddp-cnn-1x2] rank 0" in message
    assert "after the untimed optimizer steps" in message
    # The same desync also moves the loss curve away from the single process's on the same batches.
    curve = agreement.loss_curve(result)
    assert curve is not None and "loss curve diverges from a single process [ddp-cnn-1x2] at untimed step 2" in curve


def test_clean_loss_curve_tracks_the_single_process_and_final_loss_gate(tmp_path, agents):
    result = run_case(ddp_spec(), tmp_path / "case", agents=agents)
    assert agreement.loss_curve(result) is None
    final = result.losses[-1]
    assert agreement.final_loss(result, final, 0.25, "k on p") is None
    message = agreement.final_loss(result, final / 2, 0.25, "ddp-cnn-1x2:tiny on cpu-x")
    assert message == (
        f"final loss {final:.4g} is above baseline {final / 2:.4g} (tolerance 25%) [ddp-cnn-1x2:tiny on cpu-x]"
    )
