"""The team's own training script, gated unchanged: ddp and fsdp on two ranks against the same script on one.

pytest                                        # both cases, with the 1x1 run of each strategy
pytest -k fsdp --scaling-steps 30             # one strategy, more measured steps
"""

import pytest


@pytest.mark.scaling_script(
    "train.py",
    "--strategy={strategy}",
    "--max-steps={steps}",
    name="mlp",
    strategies=["ddp", "fsdp"],
    topologies=["1x2"],
    batch=32,
    loss_pattern=r"step (\d+) loss ([0-9.eE+-]+)",
    canary=True,
)
def test_train(scaling_case, benchmark):
    scaling_case.check(benchmark)
