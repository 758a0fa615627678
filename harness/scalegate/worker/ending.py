"""How a rank that returned ends: as an interpreter's exit ends the program, without its teardown. Worker side, and
light: it imports nothing of torch, so a bootstrap that runs a team's script first (worker/short_run.py) adds no
import before the script's own."""

from __future__ import annotations

import os
import sys


def quick_exit(code: int) -> None:
    """End a rank that returned: what an interpreter's exit runs for the program (its non-daemon threads joined, its
    ``atexit`` functions, the streams flushed), then ``os._exit``, without the teardown of every module and object.
    With torch imported that teardown takes 0.5-0.8 s of CPU, and between two launches of a case it is in no step
    but on the path to the next launch, where a duet's two sides end four ranks at once on two cores (docs/duet.md).
    A forked rank already ends this way (multiprocessing's children do); a rank that raised ends as usual, so its
    traceback and torchelastic's error file are written. Skipping the teardown also skips where torch 2.13 can abort
    a rank that finished after a gloo process group ("terminate called without an active exception", exit code -6;
    about one run in ten of the example script under torchrun on the 2-core CPU machines)."""
    import atexit
    import threading

    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
