"""This project's scaling tests: its own model on the strategies it cares about.

pytest                                  # every case below, a table of throughput, efficiency, verdicts
pytest -k fsdp                          # one strategy
pytest --scaling-update-baselines       # record this machine's baseline (baselines/<profile>.json)
"""

import pytest


@pytest.mark.scaling_matrix(
    models=["my_mlp"], strategies=["ddp", "fsdp", "deepspeed-zero2", "pipeline-gpipe"], topologies=["1x2"]
)
def test_my_model(scaling_case, benchmark):
    scaling_case.check(benchmark)
