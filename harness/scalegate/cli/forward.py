"""The ``--scaling-*`` options of the commands that run pytest sessions (gate, record-baselines, bisect).

Such a command declares every option pytest will read, from the same sections (plan/option_groups.py), so its
``--help`` lists them, a bad value stops it before its first session, and it reads the values it needs itself (the
gate's budget, tolerance and baseline directory) from its own namespace, under their pytest names, where the user
named them. The tokens go on to every session as given (``args.forward``), after the command's own settings.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from scalegate.plan import declare
from scalegate.plan.option_groups import SECTIONS
from scalegate.plan.option_types import typed


class Forwarded(argparse.Action):
    """A ``--scaling-*`` option: checked as pytest will check it, kept under its pytest name, passed on."""

    def __init__(self, option_strings, dest, check: Callable[[str], Any] | None = None, flag=False, repeat=False, **kw):
        super().__init__(option_strings, dest, nargs=0 if flag else None, **kw)
        self.check, self.flag, self.repeat = check, flag, repeat

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if self.flag:
            value, tokens = True, [option_string]
        else:
            try:
                value = self.check(values) if self.check is not None else values
            except argparse.ArgumentTypeError as exc:
                parser.error(f"argument {option_string}: {exc}")
            tokens = [f"{option_string}={values}"]
        if self.repeat:
            value = [*getattr(namespace, self.dest, []), value]
        setattr(namespace, self.dest, value)
        namespace.forward = [*getattr(namespace, "forward", []), *tokens]


def add(parser: argparse.ArgumentParser) -> None:
    """Every section's options on ``parser``, in one group; ``args.forward`` holds the tokens given."""
    group = parser.add_argument_group(
        "options passed on to every pytest session (pytest --help, group scaling; docs/options.md)"
    )
    for section in SECTIONS:
        for f in declare.fields(section):
            opt = declare.opt_of(f)
            name = declare.flag_name(f)
            group.add_argument(
                name,
                action=Forwarded,
                dest=declare.dest(f),
                default=argparse.SUPPRESS,
                check=typed(opt.check, name) if opt.check is not None else None,
                flag=opt.flag,
                repeat=opt.repeat,
                choices=opt.choices or None,
                metavar=opt.metavar,
                help=opt.help.replace("%(default)s", str(opt.shown or declare.default_of(f))),
            )
    parser.set_defaults(forward=[])


def passed_on(args: argparse.Namespace, extra: list[str]) -> list[str]:
    """What a session gets after the command's own settings: the ``--scaling-*`` tokens, then pytest's own."""
    extra = extra[1:] if extra[:1] == ["--"] else extra
    return [*args.forward, *extra]
