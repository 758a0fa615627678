"""Warm launches: one long-lived torchrun agent per session forks each launch's ranks (launch side).

The server (``python -m harness.agentserver``) imports torch and the harness once and runs the real
torchrun agent for every launch with ``--start-method forkserver`` (its docstring says what is and
is not shared between launches). This side starts it, keeps it while the cases it serves need no
module it has not preloaded (a case with DeepSpeed after DDP cases restarts it with DeepSpeed
added), and kills its whole process tree on a timeout, Ctrl-C or the end of the session.

A single-node job's bytes on the wire are counted on the loopback of a private network namespace
(``harness/launch/wirecount.py``): the server runs inside one namespace made for it, reused by every
launch it serves (one launch at a time, and the workers read the counter at their window's edges,
so each launch's count is exact). Only single-node jobs launch warm; emulated and SLURM nodes start
their own torchrun per launch.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.errors import LaunchError
from harness.launch import netns, process, wirecount
from harness.spec import CaseSpec

START_TIMEOUT_S = 180.0  # importing torch, DeepSpeed and Lightning on a loaded 2-core machine


def modules_for(spec: CaseSpec) -> frozenset[str]:
    """The optional packages the case's ranks import (DeepSpeed, Lightning, transformers); the server's base set
    has torch and the harness (``harness.agentserver.BASE_PRELOAD``), and a rank imports its own strategy and
    workload modules (milliseconds).

    A server preloads exactly this set, never a superset: RSS counts the pages of every imported module, so a
    DDP rank forked from a server that had imported DeepSpeed would show a higher peak memory than it costs.
    The key depends only on the case, so its memory does not depend on which cases ran before it.
    """
    import fixtures
    from harness import strategies

    strategy, workload = strategies.get(spec.strategy), fixtures.get(spec.model)
    return frozenset({*strategy.packages, *workload.packages})


@dataclass
class _Server:
    proc: subprocess.Popen
    requests: int  # our write end
    replies: object  # a line reader on our read end
    modules: frozenset[str]
    wire_env: dict[str, str]

    def alive(self) -> bool:
        return self.proc.poll() is None


def _parent_death_signal() -> None:  # pragma: no cover  (runs in the child between fork and exec)
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class AgentPool:
    """The session's warm agent. ``run`` launches one job; ``close`` ends the server and its namespace."""

    env: dict[str, str] = field(default_factory=dict)  # the server's environment; default: server_environment()
    server: _Server | None = None
    scope: netns.Scope | None = None
    log_dir: Path | None = None

    def _start(self, spec: CaseSpec, modules: frozenset[str]) -> _Server:
        self.close()
        reason = wirecount.unavailable(spec)
        prefix: list[str] = []
        wire_env = {wirecount.ENV_UNAVAILABLE: reason} if reason else {wirecount.ENV_IFACE: "lo"}
        if not reason:
            self.scope = netns.Scope()
            prefix = netns.exec_prefix(self.scope.create("warm"))
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        argv = prefix + [sys.executable, "-m", "harness.agentserver", "--fds", f"{req_r},{rep_w}",
                         "--preload", ",".join(sorted(modules))]
        log = (self.log_dir or Path("/tmp")) / f"agentserver-{os.getpid()}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=self.env or server_environment(), pass_fds=(req_r, rep_w), start_new_session=True,
                                    preexec_fn=_parent_death_signal)
        os.close(req_r)
        os.close(rep_w)
        server = _Server(proc=proc, requests=req_w, replies=os.fdopen(rep_r, "r"), modules=modules, wire_env=wire_env)
        self.server = server
        hello = self._reply(START_TIMEOUT_S)
        if not hello or not hello.get("ready"):
            self.close()
            why = (hello or {}).get("error") or f"no answer within {START_TIMEOUT_S:.0f}s"
            raise LaunchError(f"the warm torchrun agent did not start: {why} (its log: {log})",
                              "pass --scaling-launcher torchrun to start a fresh torchrun per launch")
        return server

    def _reply(self, timeout_s: float) -> dict | None:
        assert self.server is not None
        ready, _, _ = select.select([self.server.replies], [], [], timeout_s)
        if not ready:
            return None
        line = self.server.replies.readline()  # type: ignore[attr-defined]
        return json.loads(line) if line else None

    def run(self, spec: CaseSpec, argv: list[str], *, log_path: Path, timeout_s: float, env: dict[str, str],
            on_timeout: Callable[[int], None] | None = None) -> process.Completed:
        """Run one launch (``argv``: torchrun's arguments after ``-m torch.distributed.run``)."""
        needed = modules_for(spec)
        server = self.server
        if server is None or not server.alive() or server.modules != needed:
            server = self._start(spec, needed)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            log.write(("$ [warm agent] torchrun --start-method forkserver " + " ".join(argv) + "\n").encode())
        start = time.perf_counter()
        request = {"argv": argv, "env": {**env, **server.wire_env}, "log": str(log_path)}
        try:
            os.write(server.requests, (json.dumps(request) + "\n").encode())
            reply = self._reply(timeout_s)
        except BaseException:  # Ctrl-C: the job goes down with us
            self.close()
            raise
        wall = time.perf_counter() - start
        if reply is None:
            if server.alive() and on_timeout is not None:
                on_timeout(server.proc.pid)
            self.close()
            return process.Completed(returncode=None if wall >= timeout_s else -1, wall_s=wall,
                                     timed_out=wall >= timeout_s)
        return process.Completed(returncode=reply["returncode"], wall_s=wall, timed_out=False)

    def wire_env(self) -> dict[str, str]:
        return dict(self.server.wire_env) if self.server else {}

    def close(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            try:
                os.close(server.requests)  # end of input: an idle server exits by itself
            except OSError:
                pass
            try:
                server.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            process.kill_tree(server.proc, grace_s=2.0)
            server.replies.close()  # type: ignore[attr-defined]
        if self.scope is not None:
            self.scope.close()
            self.scope = None


def server_environment() -> dict[str, str]:
    """This process's environment, the checkout on PYTHONPATH (the server imports the harness), one thread:
    each launch's own settings (threads, data directory, wire counter) travel with its request."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    env.pop("TORCHELASTIC_ERROR_FILE", None)
    return env


_POOLS: list[AgentPool] = []


def pool(env: dict[str, str] | None = None, log_dir: Path | None = None) -> AgentPool:
    """A new pool, closed at interpreter exit if its owner forgets."""
    made = AgentPool(env=env or {}, log_dir=log_dir)
    _POOLS.append(made)
    return made


@atexit.register
def _close_all() -> None:
    for made in _POOLS:
        made.close()
