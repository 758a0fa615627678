"""What a hung job was doing: every rank's heartbeat and Python stack, taken before the kill.

Stacks come from ``py-spy dump`` (no cooperation from the rank needed); where py-spy is missing or
cannot attach (no ptrace), the rank is sent SIGUSR1 and its faulthandler writes the stack to
``<out_dir>/rank<r>.stack`` (the worker registers that handler at start).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from scalegate.contract import heartbeat

PY_SPY_TIMEOUT_S = 10.0


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def worker_pids(root_pid: int) -> list[int]:
    """Rank processes under the launcher: ``-m scalegate.worker`` in their command line (a cold torchrun
    started them), or forked by a multiprocessing forkserver (the warm agent's ranks carry its command line)."""
    try:
        children = psutil.Process(root_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    pids = []
    for child in children:
        try:
            if "scalegate.worker" in child.cmdline() or (_is_forkserver(child) and _is_forkserver(child.parent())):
                pids.append(child.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return pids


def _is_forkserver(proc: psutil.Process | None) -> bool:
    return proc is not None and any("multiprocessing.forkserver" in arg for arg in proc.cmdline())


def stack(pid: int, out_dir: Path, rank: int | None) -> str:
    """One process's Python stack: py-spy first, faulthandler via SIGUSR1 second."""
    tool = py_spy()
    if tool:
        try:
            done = subprocess.run(
                [tool, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=PY_SPY_TIMEOUT_S
            )
            if done.returncode == 0 and done.stdout.strip():
                return done.stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    if rank is None:
        return "(no stack: py-spy could not attach and the rank is unknown)"
    target = heartbeat.stack_path(out_dir, rank)
    try:
        os.kill(pid, signal.SIGUSR1)
    except (ProcessLookupError, PermissionError) as exc:
        return f"(no stack: {exc})"
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        if target.exists() and target.stat().st_size:
            time.sleep(0.2)  # let faulthandler finish writing every thread
            return "(faulthandler)\n" + target.read_text(errors="replace").strip()
        time.sleep(0.05)
    return "(no stack: py-spy could not attach and faulthandler wrote nothing)"


def diagnose(root_pid: int, out_dir: Path, world_size: int, case_dir: Path) -> str:
    """Heartbeat summary plus every rank's stack; stacks are also saved to ``case_dir/stacks.txt``."""
    beats = heartbeat.read_all(out_dir, world_size)
    lines = [heartbeat.summary(beats)]
    by_pid = {b.pid: r for r, b in beats.items() if b is not None}
    dumps, outside = [], []
    for pid in worker_pids(root_pid):
        rank = by_pid.get(pid)
        label = f"rank {rank}" if rank is not None else "rank ? (no heartbeat)"
        text = stack(pid, out_dir, rank)
        dumps.append(f"--- {label}, pid {pid} ---\n{text}")
        beat = beats.get(rank) if rank is not None else None
        innermost = _innermost(text, beat.thread if beat is not None else 0)
        if innermost:
            lines.append(f"{label} innermost Python frame: {innermost}")
            if "torch/" not in innermost:  # the others wait inside torch for it (a collective, backward)
                outside.append(f"{label} is stuck outside torch, in {innermost}")
    lines[1:1] = outside
    stacks_file = case_dir / "stacks.txt"
    try:
        stacks_file.write_text("\n\n".join(dumps) + "\n")
        lines.append(f"stacks of every rank: {stacks_file}")
    except OSError:
        pass
    return "\n".join(lines)


def _innermost(dump: str, thread: int = 0) -> str:
    """The innermost frame of the main thread (py-spy prints innermost first, as does faulthandler). py-spy names
    it ``MainThread``; faulthandler only by its ident (``thread``, from the rank's heartbeat), else its block is
    the one it calls the current thread (the signal's), else the first."""
    lines = dump.splitlines()
    ident = f"0x{thread:016x}" if thread else None
    start = next((i for i, line in enumerate(lines) if "MainThread" in line), 0)
    if not start and ident:
        start = next((i for i, line in enumerate(lines) if ident in line and "thread" in line.lower()), 0)
    if not start:
        start = next((i for i, line in enumerate(lines) if line.startswith("Current thread")), 0)
    for line in lines[start + 1 if start else 0 :]:
        text = line.strip()
        if not text or text.startswith(
            ("Process ", "Python v", "Thread ", "(faulthandler)", "Current thread", "Stack (")
        ):
            continue
        frame = re.match(r'File "(.+)", line (\d+) in (\S+)', text)  # faulthandler's, in py-spy's words
        return f"{frame.group(3)} ({frame.group(1)}:{frame.group(2)})" if frame else text
    return ""
