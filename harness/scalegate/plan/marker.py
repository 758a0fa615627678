"""A test file's own matrix: ``@pytest.mark.scaling_matrix(models=[...], strategies=[...], topologies=[...])``.

A user's repository holds e.g. ``scaling_tests/test_my_model.py``::

    @pytest.mark.scaling_matrix(models=["my_model"], strategies=["ddp", "fsdp"], topologies=["1x2"])
    def test_my_model(scaling_case, benchmark):
        scaling_case.check(benchmark)

The marker replaces the session's lists for that test (what it leaves out stays the session's: every
strategy, the matrix's topologies); a ``--scaling-models``, ``--scaling-strategies`` or
``--scaling-topologies`` given on the command line selects from the declared lists, as ``-k`` does. Models
are names, import paths (``mypkg.models:MyWorkload``) or ``Workload`` classes, registered in the session's
catalog like ``--scaling-models`` ones. Every other ``--scaling-*`` option applies as for
``scaling_tests/test_scaling.py``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from scalegate.contract.errors import SpecError
from scalegate.contract.topology import Topology
from scalegate.plan.catalog import Catalog
from scalegate.plan.options import Options

KEYS = ("models", "strategies", "topologies")
USAGE = '@pytest.mark.scaling_matrix(models=["my_model"], strategies=["ddp", "fsdp"], topologies=["1x2"])'


def options_for(
    options: Options,
    catalog: Catalog,
    args: tuple,
    kwargs: dict[str, Any],
    *,
    explicit: Iterable[str],
    strategy_names: list[str],
    where: str,
) -> Options:
    """The session's options with the marker's lists; ``explicit``: the keys given on the command line."""
    if args:
        raise SpecError(f"{where}: scaling_matrix takes keyword arguments only, got {args!r}", f"write {USAGE}")
    unknown = sorted(set(kwargs) - set(KEYS))
    if unknown:
        raise SpecError(
            f"{where}: scaling_matrix has no argument {unknown[0]!r}", f"use {', '.join(KEYS)}, e.g. {USAGE}"
        )
    declared: dict[str, tuple[str, ...]] = {}
    for key, value in kwargs.items():
        items = _items(key, value, where)
        label = f"{where}: scaling_matrix({key}=...)"
        if key == "models":
            names = [catalog.model(item, label) for item in items]
        elif key == "strategies":
            names = [_strategy(item, label, strategy_names) for item in items]
        else:
            names = [_topology(item, label) for item in items]
        declared[key] = tuple(dict.fromkeys(names))
    explicit = set(explicit)
    changes: dict[str, Any] = {
        key: tuple(n for n in names if key not in explicit or n in getattr(options, key))
        for key, names in declared.items()
    }
    if "topologies" in declared and "topologies" not in explicit:
        changes["matrix"] = "explicit"  # the test's own topologies, all of them cases (1x1 included)
    return dataclasses.replace(options, workloads=catalog.registered(), **changes)


def _items(key: str, value: Any, where: str) -> list[Any]:
    if isinstance(value, (str, type)):
        return [value]
    try:
        items = list(value)
    except TypeError:
        items = []
    if not items:
        raise SpecError(f"{where}: scaling_matrix({key}={value!r}) names none", f"list at least one, e.g. {USAGE}")
    return items


def _strategy(item: Any, label: str, known: list[str]) -> str:
    if item not in known:
        raise SpecError(f"{label}: unknown strategy {item!r}", f"pick from: {', '.join(known)}")
    return item


def _topology(item: Any, label: str) -> str:
    try:
        return str(Topology.parse(item))
    except SpecError as exc:
        raise SpecError(f"{label}: {exc.message}", exc.hint) from None
