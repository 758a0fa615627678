"""scalegate harness: specs, launchers, worker, strategies, metrics, baselines and the pytest plugin.

Data flows one way: CaseSpec -> launcher -> worker ranks -> per-rank JSON -> CaseResult -> checks.
The launching side (plugin, launch, baselines) never imports the worker side (worker, train) and
vice versa; both share only ``spec``, ``topology`` and ``results``.
"""

SCHEMA_VERSION = 1


def __getattr__(name: str):
    """``from harness import Workload, Preset``: the public workload API (fixtures/base.py), imported on
    first use so that importing the harness (the launching side, the CLI) does not import torch."""
    if name in ("Workload", "Preset"):
        from fixtures import base

        return getattr(base, name)
    if name == "LightningWorkload":  # a user's LightningModule as a workload (fixtures/lightning_module.py)
        from fixtures.lightning_module import LightningWorkload

        return LightningWorkload
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


__all__ = ["LightningWorkload", "Preset", "SCHEMA_VERSION", "Workload"]
