"""How the declared sections are read from a command line (each option declared once: contract/option.py).

From the sections (plan/option_groups.py ``SECTIONS``), ``declare`` makes the pytest plugin's options
(``--scaling-*``) and any argparse parser's (the gate declares them too, so its ``--help`` lists what it passes on and
reads its own settings from them), each value checked by its declared check as it is read (``type=``,
plan/option_types.py ``typed``); ``read`` turns a parsed namespace back into a section, and cli/reference.py writes
docs/options.md. Adding an option is one field in its section plus the code that uses it.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from typing import Any, Callable, Iterable

from scalegate.contract.option import PREFIX, default_of, fields, flag_name, opt_of
from scalegate.plan.option_types import typed

AddOption = Callable[..., Any]  # pytest's OptionGroup.addoption or argparse's add_argument


def dest(f: dataclasses.Field, prefix: str = PREFIX) -> str:
    """Where argparse (and pytest) keep the value: the flag's name in snake case."""
    return flag_name(f, prefix)[2:].replace("-", "_")


def description(section: type) -> str:
    """The section's docstring as one line: the heading of its options in docs/options.md."""
    return " ".join((inspect.getdoc(section) or "").split())


def kwargs_of(f: dataclasses.Field, prefix: str = PREFIX, suppress: bool = False) -> dict[str, Any]:
    """``addoption``'s keyword arguments for one field; ``suppress``: an unnamed option is left out of the namespace
    (the gate tells what the user named from what it did not)."""
    o = opt_of(f)
    kwargs: dict[str, Any] = {"help": o.help, "dest": dest(f, prefix)}
    default = default_of(f)
    kwargs["default"] = argparse.SUPPRESS if suppress else default
    if o.flag:
        kwargs["action"] = "store_true"
    elif o.repeat:
        kwargs["action"] = "append"
    if o.check is not None:
        kwargs["type"] = typed(o.check, flag_name(f, prefix))
    if o.choices:
        kwargs["choices"] = o.choices
    if o.metavar:
        kwargs["metavar"] = o.metavar
    return kwargs


def declare(
    addoption: AddOption,
    sections: tuple[type, ...],
    prefix: str = PREFIX,
    suppress: bool = False,
    only: Iterable[str] | None = None,
) -> None:
    """Every option of ``sections``, through ``addoption`` (pytest's or argparse's); ``only``: those fields alone
    (a command that takes one of a section's options, as ``compare --tolerance``)."""
    for section in sections:
        for f in fields(section):
            if only is None or f.name in only:
                addoption(flag_name(f, prefix), **kwargs_of(f, prefix, suppress))


def read(section: type, values: argparse.Namespace | dict[str, Any], prefix: str = PREFIX) -> Any:
    """The section as ``values`` (a parsed command line) give it; an option absent there keeps its default."""
    given = vars(values) if isinstance(values, argparse.Namespace) else values
    return section(**{f.name: given.get(dest(f, prefix), default_of(f)) for f in fields(section)})


def pick(target: type, *sections: Any, **overrides: Any) -> dict[str, Any]:
    """The values of ``sections`` whose fields ``target`` (a dataclass: the judge's ``Conduct`` and ``Overrides``, the
    sequential test's ``Design``) has too, by name, then ``overrides``: how a record takes the options it carries
    without listing them."""
    wanted = {f.name for f in dataclasses.fields(target)}
    found = {f.name: getattr(s, f.name) for s in sections for f in dataclasses.fields(s) if f.name in wanted}
    return {**found, **overrides}
