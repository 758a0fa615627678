"""Strategy registry: one module per strategy, registered here by name.

Adding a strategy means one module with a ``Strategy`` subclass and one line in ``_REGISTRY``.
Modules are imported lazily so listing names does not import DeepSpeed or Lightning.
"""

from __future__ import annotations

import importlib

from scalegate.contract.errors import SpecError
from scalegate.strategies.base import RankContext, Strategy

_REGISTRY: dict[str, str] = {
    "single": "scalegate.strategies.single:Single",
    "ddp": "scalegate.strategies.ddp:DDP",
    "dp": "scalegate.strategies.dp:DP",
    "fsdp": "scalegate.strategies.fsdp:FSDP",
    "fsdp1": "scalegate.strategies.fsdp1:FSDP1",
    "hsdp": "scalegate.strategies.hsdp:HSDP",
    "zero1-torch": "scalegate.strategies.zero1_torch:Zero1Torch",
    "pipeline-gpipe": "scalegate.strategies.pipeline:GPipe",
    "pipeline-1f1b": "scalegate.strategies.pipeline:OneFOneB",
    "deepspeed-zero1": "scalegate.strategies.deepspeed_zero:DeepSpeedZero1",
    "deepspeed-zero2": "scalegate.strategies.deepspeed_zero:DeepSpeedZero2",
    "deepspeed-zero3": "scalegate.strategies.deepspeed_zero:DeepSpeedZero3",
    "fabric-ddp": "scalegate.strategies.fabric:FabricDDP",
    "fabric-fsdp": "scalegate.strategies.fabric:FabricFSDP",
    "fabric-deepspeed": "scalegate.strategies.fabric:FabricDeepSpeed",
    "tp": "scalegate.strategies.tp:TP",
    "fsdp-tp": "scalegate.strategies.tp:FSDPTP",
    "lightning-ddp": "scalegate.strategies.lightning_trainer:LightningDDP",
    "lightning-fsdp": "scalegate.strategies.lightning_trainer:LightningFSDP",
    "lightning-deepspeed": "scalegate.strategies.lightning_trainer:LightningDeepSpeed",
}

# Run only when named (--scaling-strategies, scaling_matrix, parity): not part of "all". The Trainer's cases
# cost ~25 s each on the 2-core CI runners, and "all" already fills its 30-minute budget.
OPT_IN = frozenset({"lightning-ddp", "lightning-fsdp", "lightning-deepspeed"})


def names() -> list[str]:
    return list(_REGISTRY)


def get(name: str) -> type[Strategy]:
    if name not in _REGISTRY:
        raise SpecError(f"unknown strategy {name!r}", f"pick one of: {', '.join(_REGISTRY)}")
    module, cls = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)


__all__ = ["OPT_IN", "RankContext", "Strategy", "get", "names"]
