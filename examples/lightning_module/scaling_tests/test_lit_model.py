"""This project's LightningModule through the Lightning Trainer and through raw PyTorch strategies.

pytest                                  # every case below, with the results table
pytest -k lightning-ddp                 # the Trainer front end only
"""

import pytest


@pytest.mark.scaling_matrix(models=["lit_classifier"], strategies=["lightning-ddp", "ddp", "fsdp"], topologies=["1x2"])
def test_lit_model(scaling_case, benchmark):
    scaling_case.check(benchmark)
