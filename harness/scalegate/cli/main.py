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
import sys

from scalegate.cli import bisect, bisect_package, gate, init, record_baselines, runs, selftest
from scalegate.contract.errors import ScalegateError
from scalegate.gate.project import Project
from scalegate.history import cli as history_cli

EXIT_BAD_INPUT = 2
PASSES_ON = ("gate", "record-baselines", "bisect")  # the commands whose unknown arguments go to pytest


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m scalegate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    baselines = str(Project.find().baselines)
    runs.add_parsers(sub)
    gate.add_parser(sub)
    record_baselines.add_parser(sub, baselines)
    bisect.add_parser(sub)
    sub.choices["bisect"].set_defaults(handler=bisect_package.run)  # releases with --package, else commits
    history_cli.add_parser(sub, baselines)
    selftest.add_parser(sub)
    init.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
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
