"""Strategies, the worker side: one module per strategy, found by name through its card.

A strategy's card (harness/scalegate/contract/cards.py) is what the pytest side knows of it; its class here is what a rank
runs. Modules are imported on first use, so naming a strategy does not import DeepSpeed or Lightning.
"""

from __future__ import annotations

import importlib

from scalegate.contract import cards
from scalegate.strategies.base import RankContext, Strategy


def names() -> list[str]:
    return cards.names()


def get(name: str) -> type[Strategy]:
    module, cls = cards.card(name).impl.split(":")
    return getattr(importlib.import_module(module), cls)


__all__ = ["RankContext", "Strategy", "get", "names"]
