"""One declaration per option: a dataclass per section, a field per option, as torchtitan's ``job_config``.

A field carries its default; its metadata (``option(...)``) carries its one-sentence help, the ``type=`` check
(plan/option_types.py, given the option's full name), its choices and how it is read (a flag, a repeatable value).
From the sections, ``declare`` makes the pytest plugin's options (``--scaling-*``) and any argparse parser's
(the gate declares them too, so its ``--help`` lists what it passes on and reads its own settings from them),
``read`` turns a parsed namespace back into a section, and cli/reference.py writes docs/options.md. Adding an
option is one field in its section (plan/option_groups.py) plus the code that uses it.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Iterator

AddOption = Callable[..., Any]  # pytest's OptionGroup.addoption or argparse's add_argument
PREFIX = "scaling-"


@dataclass(frozen=True, kw_only=True)
class Opt:
    """How one field is read from a command line."""

    help: str
    check: Callable[[str], Callable[[str], Any]] | None = None  # the option's full name -> its type= callable
    choices: tuple[str, ...] = ()
    flag: bool = False  # store_true
    repeat: bool = False  # append: every value, in order
    metavar: str | None = None
    name: str = ""  # the option's name where it is not the field's (``timeout`` for ``timeout_s``)
    shown: str = ""  # the default as help and docs show it, where the value itself would not read well


def option(default: Any, help: str, **how: Any) -> Any:
    """A field of a section: its default and how it is read (``Opt``)."""
    opt = Opt(help=help, **how)
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata={"option": opt})
    return dataclasses.field(default=default, metadata={"option": opt})


def opt_of(f: dataclasses.Field) -> Opt:
    return f.metadata["option"]


def flag_name(f: dataclasses.Field, prefix: str = PREFIX) -> str:
    return f"--{prefix}{(opt_of(f).name or f.name).replace('_', '-')}"


def dest(f: dataclasses.Field, prefix: str = PREFIX) -> str:
    """Where argparse (and pytest) keep the value: the flag's name in snake case."""
    return flag_name(f, prefix)[2:].replace("-", "_")


def fields(section: type) -> Iterator[dataclasses.Field]:
    return (f for f in dataclasses.fields(section) if "option" in f.metadata)


def default_of(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default  # type: ignore[misc]


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
        kwargs["type"] = o.check(flag_name(f, prefix))
    if o.choices:
        kwargs["choices"] = o.choices
    if o.metavar:
        kwargs["metavar"] = o.metavar
    return kwargs


def declare(addoption: AddOption, sections: tuple[type, ...], prefix: str = PREFIX, suppress: bool = False) -> None:
    """Every option of ``sections``, through ``addoption`` (pytest's or argparse's)."""
    for section in sections:
        for f in fields(section):
            addoption(flag_name(f, prefix), **kwargs_of(f, prefix, suppress))


def read(section: type, values: argparse.Namespace | dict[str, Any], prefix: str = PREFIX) -> Any:
    """The section as ``values`` (a parsed command line) give it; an option absent there keeps its default."""
    given = vars(values) if isinstance(values, argparse.Namespace) else values
    return section(**{f.name: given.get(dest(f, prefix), default_of(f)) for f in fields(section)})


def pick(target: type, *sections: Any, **overrides: Any) -> dict[str, Any]:
    """The values of ``sections`` whose fields ``target`` (a dataclass: ``CaseSpec``, the judge's ``Conduct``) has
    too, by name, then ``overrides``: how a spec or a record takes the options it carries without listing them."""
    wanted = {f.name for f in dataclasses.fields(target)}
    found = {f.name: getattr(s, f.name) for s in sections for f in dataclasses.fields(s) if f.name in wanted}
    return {**found, **overrides}
