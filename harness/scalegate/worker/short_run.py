"""``scalegate init``'s short run of a team's script, on each rank torchrun starts: ``python -m
scalegate.worker.short_run SCRIPT ARGS...`` runs the script as ``__main__`` with its own arguments, as ``python
SCRIPT ARGS...`` would (its directory first on ``sys.path``, its error shown from its own frame down), then ends the
rank as a gate's rank ends (worker/ending.py ``quick_exit``). A gate never runs a rank through the interpreter's
teardown, where torch 2.13 can abort a gloo rank that finished, so the short run checks the script as a gate runs
it. A script that raises or exits non-zero ends as it would alone. Worker side: nothing is imported before the
script's own imports."""

from __future__ import annotations

import os
import runpy
import sys
from types import TracebackType

from scalegate.worker.ending import quick_exit


def run(argv: list[str]) -> tuple[int, dict]:
    """The script's exit code, and its ``__main__`` namespace: kept by the caller until the rank ends, so none of
    the script's objects is torn down before it."""
    if not argv:
        print("usage: python -m scalegate.worker.short_run SCRIPT [ARGS...]", file=sys.stderr)
        return 2, {}
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    try:
        return 0, runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0, {}
        print(exc.code, file=sys.stderr)  # sys.exit("message"), as the interpreter prints it
        return 1, {}
    except Exception as exc:  # as `python SCRIPT` shows it: from the script's own frame down, no bootstrap's
        sys.excepthook(type(exc), exc, _from(exc.__traceback__, argv[0]))  # torch's names the rank
        return 1, {}


def _from(tb: TracebackType | None, script: str) -> TracebackType | None:
    """The traceback from the script's first frame on (all of it where the script has none)."""
    found = tb
    while found is not None and found.tb_frame.f_code.co_filename != script:
        found = found.tb_next
    return found or tb


if __name__ == "__main__":
    code, kept = run(sys.argv[1:])  # kept: the script's namespace, alive until the rank ends
    quick_exit(code)
