"""One declaration per option, as torchtitan's ``job_config``: a section is a frozen dataclass, an option one field.

The field's default is the option's; ``option(...)`` puts into its metadata (``Opt``) the one-sentence help, the
check its value must pass (``Whole``, ``Real``, ``OneOf``, ``OnOff``, or one of the pytest side's own), its choices and
how a command line gives it. Both sides read the declarations: plan/declare.py makes the ``--scaling-*`` options of
pytest and of the commands from them, and a spec checks the values of the sections it carries with the same checks
(``check_values``), naming each value as the spec's JSON does (``key_of``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

from scalegate.contract.errors import SpecError

PREFIX = "scaling-"


class Check(Protocol):
    """What an option's value must be."""

    def read(self, option: str, text: str) -> Any:
        """``text`` from a command line as the option's value; a bad one raises ``SpecError`` naming ``option``."""
        ...

    def problem(self, value: Any) -> str | None:
        """What is wrong with a value given in code or JSON (``"is below 1"``), or None."""
        ...

    def hint(self, option: str) -> str:
        """What to pass instead."""
        ...


def _accepted(check: Check, option: str, value: Any) -> Any:
    wrong = check.problem(value)
    if wrong:
        raise SpecError(f"{option}={value!r} {wrong}", check.hint(option))
    return value


def _number(check: Check, option: str, text: str, convert: Callable[[str], Any], what: str) -> Any:
    """``text`` as ``convert`` reads it (``what`` it must be: "a whole number"), then as ``check`` takes it."""
    try:
        value = convert(text)
    except (TypeError, ValueError):
        raise SpecError(f"{option}={text!r} is not {what}", check.hint(option)) from None
    return _accepted(check, option, value)


@dataclass(frozen=True)
class Whole:
    """A whole number of at least ``low`` and at most ``high`` (None: no bound). ``said``: the hint, where the bounds'
    own would not say enough (``{option}`` stands for the option's name)."""

    low: int | None = None
    high: int | None = None
    said: str = ""

    def hint(self, option: str) -> str:
        if self.said:
            return self.said.replace("{option}", option)
        return f"pass {option} {self.low} or more" if self.low is not None else f"e.g. {option} 1"

    def problem(self, value: Any) -> str | None:
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            return f"is not in {self.low}..{self.high}" if self.high is not None else f"is below {self.low}"
        return None

    def read(self, option: str, text: str) -> int:
        return _number(self, option, text, int, "a whole number")


@dataclass(frozen=True)
class Real:
    """A number ``accept`` takes (nan and inf reach it too, so it must refuse them where they make no sense); else
    ``wrong`` says why."""

    accept: Callable[[float], bool]
    wrong: str
    said: str  # the hint; ``{option}`` stands for the option's name

    def hint(self, option: str) -> str:
        return self.said.replace("{option}", option)

    def problem(self, value: Any) -> str | None:
        return None if self.accept(value) else self.wrong

    def read(self, option: str, text: str) -> float:
        return _number(self, option, text, float, "a number")


FRACTION = Real(lambda v: 0 <= v < 1, "is not a fraction in [0, 1)", "e.g. {option} 0.1 for 10%")  # a tolerance


@dataclass(frozen=True)
class OneOf:
    """A word from ``allowed``, named in the message (argparse's ``choices`` would give no HINT)."""

    allowed: tuple[str, ...]
    said: str

    def hint(self, option: str) -> str:
        return self.said.replace("{option}", option)

    def problem(self, value: Any) -> str | None:
        if value in self.allowed:
            return None
        return "is not " + (
            " or ".join(self.allowed) if len(self.allowed) == 2 else "one of " + ", ".join(self.allowed)
        )

    def read(self, option: str, text: str) -> str:
        return _accepted(self, option, text)


@dataclass(frozen=True)
class OnOff:
    """``on`` or ``off``, as a bool."""

    def hint(self, option: str) -> str:
        return f"pass {option} on or {option} off"

    def problem(self, value: Any) -> str | None:
        return None if isinstance(value, bool) else "is not on or off"

    def read(self, option: str, text: str) -> bool:
        return OneOf(("on", "off"), self.hint(option)).read(option, text) == "on"


@dataclass(frozen=True, kw_only=True)
class Opt:
    """How one field is read from a command line, and checked wherever its value is given."""

    help: str
    check: Check | None = None
    choices: tuple[str, ...] = ()
    flag: bool = False  # store_true
    repeat: bool = False  # append: every value, in order
    metavar: str | None = None
    name: str = ""  # the option's name where it is neither ``key`` nor the field's (``timeout`` for ``timeout_s``)
    key: str = ""  # the value's name in a spec's JSON where it is not the field's (``duet_side`` for ``Duet.side``)
    shown: str = ""  # the default as help and docs show it, where the value itself would not read well


def option(default: Any, help: str, **how: Any) -> Any:
    """A field of a section: its default and how it is read (``Opt``)."""
    opt = Opt(help=help, **how)
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata={"option": opt})
    return dataclasses.field(default=default, metadata={"option": opt})


def opt_of(f: dataclasses.Field) -> Opt:
    return f.metadata["option"]


def fields(section: Any) -> Iterator[dataclasses.Field]:
    """The fields of ``section`` (a class or an instance) that are options."""
    return (f for f in dataclasses.fields(section) if "option" in f.metadata)


def default_of(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default  # type: ignore[misc]


def key_of(f: dataclasses.Field) -> str:
    """The field's name in a spec's JSON."""
    return (f.metadata["option"].key if "option" in f.metadata else "") or f.name


def flag_name(f: dataclasses.Field, prefix: str = PREFIX) -> str:
    o = opt_of(f)
    return f"--{prefix}{(o.name or o.key or f.name).replace('_', '-')}"


def check_values(section: Any, where: str = "") -> None:
    """Each option of ``section`` (an instance) as its choices and its check take it, a value it holds in code or
    JSON; ``where`` names whose it is (`` for ddp-cnn-1x2``). None is an option's "not given"."""
    for f in fields(section):
        value, o = getattr(section, f.name), opt_of(f)
        if value is None or o.flag or o.repeat:
            continue
        if o.choices and value not in o.choices:
            words = ", ".join(o.choices)
            raise SpecError(f"{key_of(f)}={value!r}{where} is not one of {words}", f"pick one of: {words}")
        wrong = o.check.problem(value) if o.check is not None else None
        if wrong:
            raise SpecError(f"{key_of(f)}={value!r}{where} {wrong}", o.check.hint(flag_name(f)))  # type: ignore[union-attr]
