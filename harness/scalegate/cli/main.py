"""``python -m scalegate COMMAND``: every command, one parser each, dispatched by what the parser names.

    python -m scalegate gate [--base REF] [--markdown FILE] [--json FILE] [pytest args, e.g. -k EXPR]   (cli/gate.py)
    python -m scalegate compare|report|update-baselines RUN ...        the commands on a finished run (cli/runs.py)
    python -m scalegate record-baselines --rounds N | --duet-aa N [pytest args]      (cli/record_baselines.py)
    python -m scalegate bisect GOOD BAD -k CASE [--package NAME] [pytest args]     (cli/bisect.py, bisect_package.py)
    python -m scalegate history add|list|show|check|report [--db URL]               (history/cli.py)
    python -m scalegate selftest --gpu                                              (cli/selftest.py)
    python -m scalegate init [--script train.py]     a team's repository: its cases, pytest.ini, CI (cli/init.py)

A command that runs pytest sessions (gate, record-baselines, bisect) passes on what it does not know itself; any
other command refuses an unknown argument. Bad input is one line and its HINT, exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from scalegate.contract.errors import ScalegateError
from scalegate.gate.project import Project

EXIT_BAD_INPUT = 2
PASSES_ON = ("gate", "record-baselines", "bisect")  # the commands whose unknown arguments go to pytest
# each command's module (under scalegate.), imported only where its parser is wanted: a nightly's `history check`
# does not import the gate's modules
COMMANDS = {
    "compare": "cli.runs",
    "report": "cli.runs",
    "update-baselines": "cli.runs",
    "gate": "cli.gate",
    "record-baselines": "cli.record_baselines",
    "bisect": "cli.bisect",
    "history": "history.cli",
    "selftest": "cli.selftest",
    "init": "cli.init",
}


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser, or only ``command``'s where it names one (the top-level help lists them all)."""
    p = argparse.ArgumentParser(
        prog="python -m scalegate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    baselines = str(Project.find().baselines)
    for name in [COMMANDS[command]] if command in COMMANDS else dict.fromkeys(COMMANDS.values()):
        module = importlib.import_module(f"scalegate.{name}")
        if name == "cli.runs":
            module.add_parsers(sub)
        elif name in ("cli.record_baselines", "history.cli"):
            module.add_parser(sub, baselines)
        else:
            module.add_parser(sub)
        if name == "cli.bisect":  # releases with --package, else commits
            sub.choices["bisect"].set_defaults(handler=importlib.import_module("scalegate.cli.bisect_package").run)
    return p


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    p = parser(given[0] if given else None)
    args, extra = p.parse_known_args(argv)
    if extra and args.command not in PASSES_ON:
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.handler(args, extra)
    except ScalegateError as exc:  # bad input: one clear line and its HINT, no traceback
        print(f"error: {exc.message}" + (f"\nHINT: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        print(f"error: {exc}\nHINT: check the paths you passed", file=sys.stderr)
        return EXIT_BAD_INPUT
