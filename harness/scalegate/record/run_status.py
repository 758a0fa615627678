"""A run's own status file, ``<run_dir>/run.json``: "running" while cases run, then "complete", or
"partial" when the session was interrupted (Ctrl-C, or SIGTERM from SLURM's time limit).

A run directory whose ``run.json`` still says "running" was killed outright (SIGKILL): also partial.
Each case's result file is written atomically as the case finishes, so a partial run keeps every
finished case.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from scalegate.contract import atomic

FILE = "run.json"


def mark_running(run_dir: Path) -> None:
    """Called as a case starts, by whichever process runs it (pytest-xdist workers too)."""
    path = Path(run_dir) / FILE
    if not path.exists():
        atomic.write_json(path, {"status": "running", "started": time.time(), "pid": os.getpid(), "argv": sys.argv})


def mark_finished(run_dir: Path, exitstatus: int, interrupted: bool) -> None:
    path = Path(run_dir) / FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    cases = sum(1 for p in Path(run_dir).glob("*.json") if p.name != FILE)
    data.update(
        status="partial" if interrupted else "complete",
        finished=time.time(),
        exitstatus=int(exitstatus),
        cases_written=cases,
    )
    if interrupted:
        data["reason"] = "interrupted (Ctrl-C or SIGTERM): cases that had not finished have no result file"
    atomic.write_json(path, data)


def read(run_dir: Path) -> str:
    """The run's status: complete, partial, running (a killed run reads as partial to its readers)."""
    try:
        return str(json.loads((Path(run_dir) / FILE).read_text()).get("status", "unknown"))
    except (OSError, ValueError, AttributeError):
        return "unknown"


def install_sigterm(run_dir: Path) -> None:
    """SLURM's time limit sends SIGTERM (then SIGKILL after KillWait). Raising KeyboardInterrupt for it
    lets the running case kill its job tree and pytest finish the session, as for Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        return

    def terminate(signum: int, frame) -> None:
        # Marked now: pytest's own interrupt report can outlast KillWait on a loaded machine.
        if (Path(run_dir) / FILE).exists():
            mark_finished(run_dir, 2, interrupted=True)
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None) or getattr(
        signal.getsignal(signal.SIGTERM), "__qualname__", ""
    ).startswith("install_sigterm"):
        signal.signal(signal.SIGTERM, terminate)
