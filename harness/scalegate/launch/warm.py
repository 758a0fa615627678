"""Warm launches: one long-lived torchrun agent per session forks each launch's ranks (launch side).

The server (``python -m scalegate.worker.agent``) imports torch and the harness once and runs the real
torchrun agent for every launch with ``--start-method forkserver`` (its docstring says what is and
is not shared between launches). This side starts it, keeps it while the cases it serves need no
module it has not preloaded (a case with DeepSpeed after DDP cases restarts it with DeepSpeed
added, and the next DDP case restarts it without), and kills its whole process tree (server,
forkserver, ranks: one process group) on a timeout, on Ctrl-C, when it dies during a launch, and at
the end of the session.

A server that cannot start (an import fails, no answer within ``START_TIMEOUT_S``) raises
``AgentUnavailable``; ``WarmLauncher`` then launches that case with a cold torchrun and says so in the
result, and the pool does not try the same server again this session. A crash in the ranks is the
case's own failure and is reported as on the cold path.

Nothing outlives the session's process: the server gets SIGTERM when the thread that started it
exits (PR_SET_PDEATHSIG; its agent then stops the ranks), the forkserver exits when the server
does, and every rank gets SIGKILL when the forkserver exits (set in ``scalegate.worker.entry.forked_main``).
A team's script's ranks, started fresh by the server itself, get SIGKILL when the server exits
(``scalegate.worker.entry.die_with``): they run in sessions of their own, out of the reach of the tree's kill.
A namespace left by a SIGKILLed session is deleted when the next pool starts a server.

A single-node job's bytes on the wire are counted on the loopback of a private network namespace
(``harness/scalegate/launch/wirecount.py``): the server runs inside one namespace made for it, reused by every
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

from scalegate.contract import checkout
from scalegate.contract.errors import LaunchError
from scalegate.contract.results import CaseResult
from scalegate.contract.spec import CaseSpec
from scalegate.launch import netns, process, wirecount
from scalegate.launch.base import Job, extensions, rank_logs, register_launcher
from scalegate.launch.local import Launch, TorchrunLauncher, with_port_retries

START_TIMEOUT_S = 180.0  # importing torch, DeepSpeed and Lightning on a loaded 2-core machine
EXIT_WAIT_S = 5.0  # an idle server exits at the end of its input; a busy or stuck one is killed after this
KILL_GRACE_S = 2.0  # SIGTERM (the agent stops its ranks), then SIGKILL
COLD_HINT = "pass --scaling-launcher torchrun to start a fresh torchrun per launch"


class AgentUnavailable(LaunchError):
    """The warm agent could not start; the case can still launch with a cold torchrun."""


class AgentDied(LaunchError):
    """The warm agent exited while it ran a launch (killed from outside, out of memory)."""


def modules_for(spec: CaseSpec) -> frozenset[str]:
    """The optional packages the case's ranks import (DeepSpeed, Lightning, transformers), its parity companion's
    included; the server's base set has torch and the harness (``scalegate.worker.agent.BASE_PRELOAD``), and a rank
    imports its own strategy and workload modules (milliseconds).

    A server preloads exactly this set, never a superset: RSS counts the pages of every imported module, so a
    DDP rank forked from a server that had imported DeepSpeed would show a higher peak memory than it costs.
    The key depends only on the case, so its memory does not depend on which cases ran before it.
    """
    from scalegate import workloads
    from scalegate.contract import cards

    if spec.script is not None:  # a team's script's ranks are fresh interpreters (``run``): nothing to preload
        return frozenset()
    # the strategy's card, not the strategy: the launching side never imports the ranks' code
    used = [cards.card(name) for name in filter(None, (spec.strategy, spec.companion))]
    # a user's workload (spec.workload) is imported here, from the spec's import_paths, as each rank will
    return frozenset({*(p for c in used for p in c.packages), *workloads.resolve(spec).packages})


@dataclass(frozen=True, kw_only=True)
class _Key:
    """What a server is made for: a case needing another key gets another server."""

    modules: frozenset[str]
    no_wire: str  # why bytes on the wire are not counted ("" = counted in the server's own namespace)
    fresh: bool = False  # a team's script: every launch's ranks start fresh, so the server preloads nothing


@dataclass
class _Server:
    proc: subprocess.Popen
    requests: int  # our write end
    replies: int  # our read end
    key: _Key
    log: Path
    pending: bytes = b""  # what was read past the last full reply line

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
    log_dir: Path | None = None
    server: _Server | None = None
    scope: netns.Scope | None = None
    failed: dict[_Key, str] = field(default_factory=dict)  # servers that did not start, and why

    def run(
        self,
        spec: CaseSpec,
        argv: list[str],
        *,
        log_path: Path,
        timeout_s: float,
        env: dict[str, str],
        on_timeout: Callable[[int], None] | None = None,
    ) -> process.Completed:
        """Run one launch (``argv``: torchrun's arguments after ``-m torch.distributed.run``).

        Raises ``AgentUnavailable`` before anything ran when no server can serve the case, ``AgentDied``
        when the server exits mid-launch. At the timeout ``on_timeout(server pid)`` runs first (the ranks
        are still alive, to be diagnosed), then the tree is killed; the next launch starts a fresh server.
        """
        server = self._server_for(spec)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # A team's script's ranks start as fresh interpreters, as `torchrun train.py` starts them (worker/agent.py
        # ``fresh``): forked from the server that preloaded torch, a script's own teardown can behave otherwise (seen:
        # DDP's reducer freeing a gloo process group deadlocked on the GIL after an extra all_reduce)
        fresh = server.key.fresh
        with open(log_path, "ab") as log:
            how = "" if fresh else " --start-method forkserver"
            log.write((f"$ [warm agent] torchrun{how} " + " ".join(argv) + "\n").encode())
        wire = {wirecount.ENV_UNAVAILABLE: server.key.no_wire} if server.key.no_wire else {wirecount.ENV_IFACE: "lo"}
        request = {"argv": argv, "env": {**env, **wire}, "log": str(log_path), "fresh": fresh}
        start = time.perf_counter()
        try:
            try:
                os.write(server.requests, (json.dumps(request) + "\n").encode())
                line = self._read_line(server, timeout_s)
            except BrokenPipeError:  # it died since we last looked
                line = b""
            if (
                line is None and on_timeout is not None
            ):  # the tree is still alive; the except below kills it if this raises
                on_timeout(server.proc.pid)
        except BaseException:  # Ctrl-C, SIGTERM raised here: the job goes down with us
            self.kill()
            raise
        wall = time.perf_counter() - start
        if line is None:
            self.kill()
            return process.Completed(returncode=None, wall_s=wall, timed_out=True)
        if not line:
            status = self._exit_status(server)
            self.kill()
            raise AgentDied(
                f"the warm torchrun agent exited during the launch ({status}), "
                f"so every process of the job was killed; its log: {server.log}",
                COLD_HINT,
            )
        return process.Completed(returncode=json.loads(line)["returncode"], wall_s=wall, timed_out=False)

    def _server_for(self, spec: CaseSpec) -> _Server:
        key = key_for(spec)
        if key in self.failed:
            raise AgentUnavailable(self.failed[key], COLD_HINT)
        if self.server is not None and self.server.alive() and self.server.key == key:
            return self.server
        self.close()
        try:
            return self._start(key)
        except AgentUnavailable as exc:
            self.failed[key] = exc.message
            raise

    def _start(self, key: _Key) -> _Server:
        log = (self.log_dir or Path("/tmp")) / f"agentserver-{os.getpid()}.log"
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            prefix: list[str] = []
            if not key.no_wire:
                netns.cleanup_stale()  # namespaces of a SIGKILLed earlier session
                self.scope = netns.Scope()
                prefix = netns.exec_prefix(self.scope.create("warm"))
            self.server = self._spawn(prefix, key, log)
            line = self._read_line(self.server, START_TIMEOUT_S)
        except LaunchError as exc:  # no namespace, no log directory
            self.kill()
            raise AgentUnavailable(f"the warm torchrun agent did not start: {exc.message}", COLD_HINT) from None
        except OSError as exc:
            self.kill()
            raise AgentUnavailable(f"the warm torchrun agent did not start: {exc}", COLD_HINT) from None
        except BaseException:  # Ctrl-C while it imports
            self.kill()
            raise
        hello = json.loads(line) if line else {}
        if not hello.get("ready"):
            why = hello.get("error") or (
                f"no answer within {START_TIMEOUT_S:.0f}s"
                if line is None
                else f"it exited before it was ready ({self._exit_status(self.server)})"
            )
            self.kill()
            raise AgentUnavailable(f"the warm torchrun agent did not start: {why} (its log: {log})", COLD_HINT)
        return self.server

    def _spawn(self, prefix: list[str], key: _Key, log: Path) -> _Server:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        argv = prefix + [
            sys.executable,
            "-m",
            "scalegate.worker.agent",
            "--fds",
            f"{req_r},{rep_w}",
            *(["--fresh-only"] if key.fresh else ["--preload", ",".join(sorted(key.modules))]),
        ]
        try:
            with open(log, "ab") as out:
                # its own session: a terminal's Ctrl-C reaches pytest only, and we kill the group
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self.env or server_environment(),
                    pass_fds=(req_r, rep_w),
                    start_new_session=True,
                    preexec_fn=_parent_death_signal,
                )
        except BaseException:
            for fd in (req_r, req_w, rep_r, rep_w):
                os.close(fd)
            raise
        os.close(req_r)
        os.close(rep_w)
        return _Server(proc=proc, requests=req_w, replies=rep_r, key=key, log=log)

    @staticmethod
    def _read_line(server: _Server, timeout_s: float) -> bytes | None:
        """The server's next reply line; None at the timeout; b"" when it closed its end (it exited)."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in server.pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([server.replies], [], [], left)[0]:
                return None
            chunk = os.read(server.replies, 65536)
            if not chunk:
                return b""
            server.pending += chunk
        line, _, server.pending = server.pending.partition(b"\n")
        return line + b"\n"

    @staticmethod
    def _exit_status(server: _Server) -> str:
        try:
            code = server.proc.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            return "still running, no reply"
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"

    def close(self) -> None:
        """End the server: an idle one exits at the end of its input; what is left is killed."""
        if self.server is not None:
            try:
                os.close(self.server.requests)
                self.server.requests = -1
                self.server.proc.wait(timeout=EXIT_WAIT_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def kill(self) -> None:
        """Kill the server's whole tree now (forkserver and ranks share its process group) and its namespace."""
        server, self.server = self.server, None
        if server is not None:
            process.kill_tree(server.proc, grace_s=KILL_GRACE_S)
            for fd in (server.requests, server.replies):
                try:
                    os.close(fd)
                except OSError:
                    pass
        if self.scope is not None:
            self.scope.close()
            self.scope = None


def server_environment() -> dict[str, str]:
    """This process's environment, the checkout on PYTHONPATH (the server imports the harness), one thread:
    each launch's own settings (threads, data directory, wire counter) travel with its request."""
    env = extensions(checkout.environment(dict(os.environ)))  # the scalegate this session imported
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    env.pop("TORCHELASTIC_ERROR_FILE", None)
    return env


@register_launcher("warm")
class WarmLauncher(TorchrunLauncher):
    """``--scaling-launcher warm`` (the default): the session's warm agent forks a single-node case's ranks (~2 s a
    launch). It is a torchrun launcher because it falls back to one: without a pool (``Settings.agents``), for a
    multi-node case, or where the agent cannot start (``result.launch["note"]`` then says why)."""

    def command(self, job: Job) -> list[str]:
        return self.torchrun_args(job)  # the agent runs torchrun's own main on these

    def run(self, spec: CaseSpec, case_dir: Path) -> CaseResult:
        agents = self.settings.agents
        if agents is None or spec.topo.multi_node:
            return super().run(spec, case_dir)
        launch = Launch.claim(spec, case_dir)

        def once(port: int, log_dir: Path) -> process.Completed:
            return agents.run(
                spec,
                self.command(launch.job(port, log_dir)),
                log_path=launch.case_dir / "launcher.log",
                timeout_s=spec.execution.timeout_s,
                env=self.environment(spec),
                on_timeout=launch.on_timeout,
            )

        done: process.Completed | None = None
        how: dict[str, str] = {"launcher": "warm"}
        try:
            done = with_port_retries(launch.case_dir, once)
        except AgentUnavailable as exc:  # the launcher's failure, not the case's: launch it cold
            how = {"launcher": "torchrun", "note": f"launched with a cold torchrun: {exc.message}"}
        except AgentDied as exc:
            raise LaunchError(f"{spec.case_id}: {exc.message}\n{rank_logs(launch.case_dir)}", exc.hint) from None
        return self.finish(launch, self.cold(launch) if done is None else done, how)


_POOLS: list[AgentPool] = []


def key_for(spec: CaseSpec) -> _Key:
    """The server a case needs: its preloaded modules, and where its bytes on the wire are counted."""
    return _Key(modules=modules_for(spec), no_wire=wirecount.unavailable(spec) or "", fresh=spec.script is not None)


def pool(env: dict[str, str] | None = None, log_dir: Path | None = None) -> AgentPool:
    """A new pool, closed at interpreter exit if its owner forgets."""
    made = AgentPool(env=env or {}, log_dir=log_dir)
    _POOLS.append(made)
    return made


@atexit.register
def _close_all() -> None:
    for made in _POOLS:
        made.close()
