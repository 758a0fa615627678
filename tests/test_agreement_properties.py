"""Gradient agreement is not tuned to one shape: hypothesis draws model widths, batch sizes and
world sizes 1-4, and every example is a real multi-process DDP job compared with a single process.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalegate.checks import agreement
from scalegate.contract.spec import CaseSpec
from scalegate.launch import run_case


@pytest.mark.slow  # several real two-rank launches, one per drawn shape
@settings(
    max_examples=3,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    width=st.integers(2, 24),
    hidden=st.integers(4, 96),
    micro_batch=st.integers(1, 12),
    world=st.integers(1, 4),
    strategy=st.sampled_from(["ddp", "single"]),
)
@pytest.mark.nightly  # nightly: a launch per drawn shape
def test_ddp_agrees_for_drawn_shapes(tmp_path_factory, agents, width, hidden, micro_batch, world, strategy):
    if strategy == "single":
        world = 1
    spec = CaseSpec.of(
        strategy=strategy,
        model="cnn",
        preset="tiny",
        topology=f"1x{world}",
        micro_batch=micro_batch,
        steps=1,
        warmup=2,
        dims={"width": width, "hidden": hidden},
    )
    result = run_case(spec, tmp_path_factory.mktemp("case"), agents=agents)
    assert agreement.agreement(result) is None
    assert len(result.ranks) == world
