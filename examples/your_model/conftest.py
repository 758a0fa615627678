"""Tells scalegate about this project's workloads (a hook scalegate's pytest plugin defines)."""

from my_model import MyMLP


def pytest_scaling_workloads():
    return [MyMLP]
