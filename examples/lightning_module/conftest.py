"""Tells scalegate about this project's LightningModule workload (a hook scalegate's pytest plugin defines)."""

from lit_model import LitWorkload


def pytest_scaling_workloads():
    return [LitWorkload]
