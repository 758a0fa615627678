"""Run a command in its own process group with a timeout; always kill the whole tree."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil


@dataclass(frozen=True, kw_only=True)
class Completed:
    returncode: int | None  # None: killed at the timeout
    wall_s: float
    timed_out: bool


def free_port() -> int:
    """A TCP port the kernel just handed out and nobody listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kill_tree(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM the process group and every descendant, then SIGKILL what is left."""
    family = _family(proc.pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in family:  # descendants that left the group (setsid) are signalled directly
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(psutil.pid_exists(p) and _alive(p) for p in family):
            time.sleep(0.05)
        if not any(psutil.pid_exists(p) and _alive(p) for p in family):
            break
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass


def _family(pid: int) -> list[int]:
    """``pid``, its descendants, and every member of its process group: when the leader is already gone (the
    warm agent, killed from outside) its forkserver and ranks are orphans, no longer its descendants."""
    family = {pid}
    try:
        family.update(c.pid for c in psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        pass
    for other in psutil.pids():
        try:
            if os.getpgid(other) == pid:
                family.add(other)
        except OSError:
            continue
    return sorted(family)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def run(
    argv: list[str],
    *,
    log_path: Path,
    timeout_s: float,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    on_timeout: Callable[[int], None] | None = None,
) -> Completed:
    """Run ``argv`` in a new session; at the timeout call ``on_timeout(pid)`` (e.g. to dump stacks),
    then kill the whole tree. Ctrl-C or SIGTERM (raised as an exception here) also kills the tree."""
    start = time.perf_counter()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(("$ " + " ".join(argv) + "\n").encode())  # the exact command, to rerun by hand
        log.flush()
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout_s)
            return Completed(returncode=code, wall_s=time.perf_counter() - start, timed_out=False)
        except subprocess.TimeoutExpired:
            if on_timeout is not None:  # the tree is still alive here; the finally below kills it if this raises
                on_timeout(proc.pid)
            kill_tree(proc)
            return Completed(returncode=None, wall_s=time.perf_counter() - start, timed_out=True)
        except BaseException:  # Ctrl-C in pytest: take the job down with us
            kill_tree(proc)
            raise
        finally:
            if proc.poll() is None:
                kill_tree(proc)
