"""The ``type=`` callables that check each option's value as argparse reads it.

A declared option's is its check (contract/option.py) given the option's full name (``typed``: ``--scaling-steps``,
or ``--tolerance`` in the CLI), so one check serves every prefix its group is declared with; the checks below are
the pytest side's own (a directory, topologies, a fault's text: ``Text``) and the commands'. A bad value raises
``argparse.ArgumentTypeError`` naming the option, the value and a HINT; argparse prints it after the option's name,
and pytest turns it into a usage error before any case is collected. Checks that need two options or the session's
catalog are in plan/options.py.
"""

from __future__ import annotations

import argparse
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from scalegate.contract.errors import SpecError
from scalegate.contract.faults import parse_fault
from scalegate.contract.option import FRACTION, Check, OneOf, OnOff, Real, Whole
from scalegate.contract.topology import Topology
from scalegate.contract.units import parse_rate


def usage(message: str, hint: str) -> argparse.ArgumentTypeError:
    """The error a ``type=`` callable raises: the same two lines a ``ScalegateError`` prints."""
    return argparse.ArgumentTypeError(f"{message}\nHINT: {hint}")


def _from_spec_error(exc: SpecError) -> argparse.ArgumentTypeError:
    return usage(exc.message, exc.hint)


def typed(check: Check, option: str) -> Callable[[str], Any]:
    """The ``type=`` callable of ``option``: its text read by its declared check (contract/option.py)."""

    def read(text: str) -> Any:
        try:
            return check.read(option, text)
        except SpecError as exc:
            raise _from_spec_error(exc) from None

    return read


@dataclass(frozen=True)
class Text:
    """A check of the pytest side's alone: ``parse(option)`` is a ``type=`` callable below (a directory, topologies,
    a fault's text); what it returns is the value, with nothing more to check."""

    parse: Callable[[str], Callable[[str], Any]]

    def read(self, option: str, text: str) -> Any:
        return self.parse(option)(text)

    def problem(self, value: Any) -> str | None:
        return None

    def hint(self, option: str) -> str:
        return ""


def whole(option: str, low: int | None = None, high: int | None = None, hint: str = "") -> Callable[[str], int]:
    """An integer of at least ``low`` and at most ``high`` (``None``: no bound); ``hint`` says what to pass."""
    return typed(Whole(low, high, hint), option)


def real(option: str, accept: Callable[[float], bool], problem: str, hint: str) -> Callable[[str], float]:
    """A number ``accept`` takes; otherwise ``"{option}={value} {problem}"``."""
    return typed(Real(accept, problem, hint), option)


def fraction(option: str) -> Callable[[str], float]:
    """A tolerance: a fraction in [0, 1)."""
    return typed(FRACTION, option)


def one_of(option: str, allowed: Iterable[str], hint: str) -> Callable[[str], str]:
    """A word from ``allowed``, named in the message (argparse's ``choices`` would give no HINT)."""
    return typed(OneOf(tuple(allowed), hint), option)


def on_off(option: str) -> Callable[[str], bool]:
    """``on`` or ``off``, as a bool."""
    return typed(OnOff(), option)


def topologies(option: str) -> Callable[[str], tuple[str, ...] | None]:
    """Comma-separated ``NxG`` topologies, each in its canonical spelling, repeats dropped. Empty (an unset
    variable in a CI script) leaves the matrix's topologies."""

    def check(text: str) -> tuple[str, ...] | None:
        if not text:
            return None
        found = []
        for item in text.split(","):
            try:
                found.append(str(Topology.parse(item)))
            except SpecError as exc:
                raise usage(f"{option}: {exc.message}", exc.hint) from None
        return tuple(dict.fromkeys(found))

    return check


def directory(option: str) -> Callable[[str], str | None]:
    """A data directory, made absolute: the ranks run elsewhere (another cwd, other nodes' agents). Empty: none."""

    def check(text: str) -> str | None:
        if not text:
            return None
        if not Path(text).is_dir():
            raise usage(
                f"{option} {text} is not a directory",
                "pass a directory holding MNIST idx files and/or SQuAD JSON with a tokenizer/ folder",
            )
        return str(Path(text).resolve())

    return check


def output_dir(option: str) -> Callable[[str], str]:
    """A directory the suite reads or writes (one it writes into is made if missing): a file at that path is
    refused, not read as an empty directory."""

    def check(text: str) -> str:
        if Path(text).exists() and not Path(text).is_dir():
            raise usage(
                f"{option} {text} is a file, not a directory",
                "pass a directory (one the suite writes into is created if missing)",
            )
        return text

    return check


def output_file(option: str) -> Callable[[str], str]:
    """A file a command writes when it ends (a PR comment, its JSON), its directories made then: refused now where
    it is a directory or lies under a file, rather than after the run it reports on."""

    def check(text: str) -> str:
        path = Path(text)
        if path.is_dir():
            raise usage(
                f"{option} {text} is a directory, not a file",
                "name a file to write (the directories above it are made)",
            )
        above = path.parent
        while not above.exists() and above != above.parent:
            above = above.parent
        if not above.is_dir():
            raise usage(
                f"{option} {text} lies under {above}, which is a file",
                "name a file in a directory (the directories above it are made)",
            )
        return text

    return check


def link_rate(option: str) -> Callable[[str], str]:
    """A ``tc`` rate such as ``1gbit``, lower-cased as ``tc`` takes it."""

    def check(text: str) -> str:
        try:
            parse_rate(text)
        except SpecError as exc:
            raise _from_spec_error(exc) from None
        return text.strip().lower()

    return check


def faults(option: str) -> Callable[[str], tuple[tuple[str, dict[str, int]], ...]]:
    """One ``--scaling-inject-fault`` value: faults separated by ``;``, each as ``(its text, its Faults fields)``
    so that a fault repeated across values can be named where they are merged (plan/options.py)."""

    def check(text: str) -> tuple[tuple[str, dict[str, int]], ...]:
        try:
            return tuple((item, parse_fault(item)) for item in text.split(";") if item.strip())
        except SpecError as exc:
            raise _from_spec_error(exc) from None

    return check


def tensorboard_dir(option: str) -> Callable[[str], Path | None]:
    """Where TensorBoard scalars go (empty: nowhere). A missing tensorboard package is refused here, before any
    case runs, rather than when the first case's scalars are written."""

    def check(text: str) -> Path | None:
        if not text:
            return None
        output_dir(option)(text)
        if not _importable("tensorboard"):
            raise usage(
                f"{option} needs the tensorboard package, which cannot be imported (No module named 'tensorboard')",
                "pip install -e .[report] (or pip install 'tensorboard>=2.15') into the suite's environment, "
                f"or drop {option}",
            )
        return Path(text)

    return check


def _importable(name: str) -> bool:
    try:  # a module set to None in sys.modules (blocked) gives None; one without a __spec__ raises ValueError
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
