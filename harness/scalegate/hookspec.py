"""Hooks scalegate's pytest plugin adds (registered with ``pytest_addhooks``), for a user's conftest.py."""

from __future__ import annotations

import pytest


@pytest.hookspec
def pytest_scaling_workloads() -> list:
    """Return the ``scalegate.Workload`` subclasses this project measures, e.g. ``[MyWorkload]``.

    Each joins the scaling matrix under its ``name`` (test ids ``ddp-my_model-1x2``), beside the built-in
    workloads, and can be named in ``--scaling-models`` and ``@pytest.mark.scaling_matrix(models=[...])``.
    Implement it in a conftest.py pytest loads at start (the rootdir's, or one in a directory given on the
    command line). Define the classes in a module of their own, not in the conftest: every rank imports
    that module by name (docs/your-model.md).
    """
