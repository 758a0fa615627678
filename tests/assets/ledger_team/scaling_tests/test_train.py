"""The team's script gated on ddp and fsdp at 1x2 (one node) and 2x1 (two), against the same script on one process."""

import pytest


@pytest.mark.scaling_script(
    "train.py",
    "--strategy={strategy}",
    "--max-steps={steps}",
    name="mlp",
    strategies=["ddp", "fsdp"],
    topologies=["1x2", "2x1"],
    batch=64,
    loss_pattern=r"step (\d+) loss ([0-9.eE+-]+)",
    canary=True,
)
def test_train(scaling_case, benchmark):
    scaling_case.check(benchmark)
