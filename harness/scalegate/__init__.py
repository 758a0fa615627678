"""scalegate: a pytest-benchmark suite that catches scaling regressions in distributed PyTorch training.

This directory is the ``scalegate`` package (pyproject.toml maps it; the workloads in the repository's
``fixtures/`` are ``scalegate.workloads``). Its tree is the data flow, read bottom to top
(docs/architecture.md): ``contract`` <- ``plan`` -> ``launch`` -> ``worker`` + ``measure`` + ``strategies``
(the rank processes) -> ``figures`` -> ``checks`` -> ``judge`` -> ``record``, ``report``, ``history`` ->
``cli`` and the pytest front end (``plugin``, ``session``). The launching side never imports the worker
side; both share only ``contract``. An import-linter contract in pyproject.toml holds the layers.
"""


def __getattr__(name: str):
    """``from scalegate import Workload, Preset``: the public workload API (fixtures/base.py), imported on
    first use so that importing scalegate (the launching side, the CLI) does not import torch."""
    if name in ("Workload", "Preset"):
        from scalegate.workloads import base

        return getattr(base, name)
    if name == "LightningWorkload":  # a user's LightningModule as a workload (fixtures/lightning_module.py)
        from scalegate.workloads.lightning_module import LightningWorkload

        return LightningWorkload
    raise AttributeError(f"module 'scalegate' has no attribute {name!r}")


def step() -> None:
    """Mark one training step, for a training script whose loop steps no torch optimizer (docs/your-script.md).

    Under ``@pytest.mark.scaling_script`` the bootstrap then counts these calls instead of optimizer steps;
    anywhere else it does nothing, so the script runs as it does without scalegate."""
    import sys

    script = sys.modules.get("scalegate.worker.script")
    clock = getattr(script, "ACTIVE", None)
    if clock is not None:
        clock.manual_step()


__all__ = ["LightningWorkload", "Preset", "Workload", "step"]
