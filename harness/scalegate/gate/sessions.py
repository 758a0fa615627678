"""The gate's pytest sessions while they run: each started in its tree, all ended with the gate, their runs read back.

A gate (gate/life.py) owns one ``Sessions``; every session it starts is in it until it ends. Whatever stops the gate
(a signal, a failed round, a node gone) ends the sessions still running first (``ending``, ``stop``): before the base
worktree they run in is removed, and before the coordinator they pair through is closed. A session's process is also
ended by the kernel when the gate's process dies, killed or not (``PR_SET_PDEATHSIG``), so none of its ranks outlives
a gate.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Iterator, Sequence

from scalegate.contract import checkout
from scalegate.contract.errors import ScalegateError
from scalegate.gate.project import NO_CASES_HINT

PYTEST_BAD_INPUT = (2, 3, 4, 5)  # interrupted, internal error, usage error, nothing collected
NO_CASES = 5  # pytest's exit code when nothing was collected
_LIBC = ctypes.CDLL(None) if sys.platform.startswith("linux") else None
PR_SET_PDEATHSIG = 1


class NoCases(ScalegateError):
    """A session selected no scaling case (pytest exit code 5): bad input, unless another session (parity) ran."""


def _end_with_gate() -> None:
    """In a session's process before it runs: SIGTERM it when the gate's process dies, killed or not, so no session
    (and none of its ranks) outlives a gate."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def environment(tree: Path, drop: Sequence[str] = ()) -> dict[str, str]:
    """A session's environment in ``tree``: it imports that tree's own scalegate (contract/checkout.py); ``drop``:
    variables it must not inherit (another venv's side)."""
    return checkout.environment({k: v for k, v in os.environ.items() if k not in drop}, tree)


class Sessions:
    """The sessions running now, ended together when the gate stops."""

    def __init__(self) -> None:
        self.live: set[subprocess.Popen] = set()

    def start(
        self, argv: list[str], *, tree: Path, env: dict[str, str], log: IO[str] | None = None
    ) -> subprocess.Popen:
        """A session in ``tree``, live until ``finish``; ``log``: its output's file (else the terminal)."""
        proc = subprocess.Popen(
            argv,
            cwd=tree,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT if log else None,
            preexec_fn=_end_with_gate,
        )
        self.live.add(proc)
        return proc

    def finish(self, proc: subprocess.Popen) -> int:
        """Its exit code, once it has ended."""
        code = proc.wait()
        self.live.discard(proc)
        return code

    def run(self, argv: list[str], *, tree: Path) -> int:
        """One session on the terminal, in ``tree`` with its own environment, to its end."""
        with self.ending():
            return self.finish(self.start(argv, tree=tree, env=environment(tree)))

    @contextlib.contextmanager
    def ending(self) -> Iterator[None]:
        """Whatever stops the block, the sessions still running end first."""
        try:
            yield
        except BaseException:
            self.stop()
            raise

    def stop(self, grace_s: float = 30.0) -> None:
        """End every session still running: SIGTERM first (each cleans up its ranks, agents and namespaces, and marks
        its run partial: record/run_status.py), SIGKILL for what outlives ``grace_s``."""
        for proc in list(self.live):
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + grace_s
        for proc in list(self.live):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            self.live.discard(proc)


def check_run(returncode: int, run_dir: Path, what: str) -> Path:
    """The run a pytest session wrote under ``run_dir``; bad input when it could not run or wrote none."""
    if returncode == NO_CASES:
        raise NoCases(f"{what}: no scaling case was selected (pytest exit code 5)", NO_CASES_HINT)
    if returncode in PYTEST_BAD_INPUT:
        raise ScalegateError(
            f"{what}: the scaling suite could not run (pytest exit code {returncode}: see its output above)",
            "check the arguments after `gate`; `pytest --help` lists the --scaling-* options",
        )
    latest = run_dir / "latest"
    if not latest.exists():
        raise ScalegateError(f"{what} wrote no run under {run_dir}", "rerun; read the output above")
    return latest.resolve()
