"""A warm torchrun agent: torch imported once, every launch's ranks forked fresh from a preloaded forkserver.

    python -m scalegate.worker.agent --fds R,W [--preload deepspeed,lightning]
    python -m scalegate.worker.agent --fds R,W --fresh-only     # a team's script: its ranks start fresh

A cold launch spends ~6 s before its first step: torchrun imports torch, each rank imports torch,
the harness and ``torch._dynamo`` (AdamW's first construction), for < 1 s of measured steps. This
process pays those imports once. For each request it runs the *real* torchrun agent
(``torch.distributed.run``'s own ``parse_args`` + ``config_from_args`` on the argument list the
launcher built, then ``elastic_launch``) with ``--start-method forkserver``: the ranks are new
processes, forked from a forkserver that has only imported modules (nothing initialised, no
threads), so each launch still gets fresh processes, ranks, ports, allocations and scheduling,
which is what repeated launches are for. Only imported code is shared between launches. Each
rank's environment is the launch's own plus torchrun's variables, as under a cold torchrun
(``scalegate.worker.entry.forked_main``). A team's script's ranks start as fresh interpreters instead, as a cold
torchrun starts them (``fresh`` below); a server for those (``--fresh-only``) imports torchrun's agent alone and
starts no forkserver.

Protocol, one JSON line each way on the pipes ``--fds`` names (so the agent's own output can go to
each case's ``launcher.log``): first the server says ``{"ready": true, "pid": ..., "modules":
[...]}`` once everything is imported, or ``{"ready": false, "error": "..."}`` and
exits 2 (the traceback goes to its own log). Then per launch: request ``{"argv": [...torchrun
args...], "env": {...}, "log": PATH, "fresh": false}`` (``fresh``: a team's script, whose ranks start as fresh
interpreters, as under a cold torchrun), reply ``{"returncode": 0 | 1 | 2, "wall_s": ...}`` (1: a
rank failed, 2: the agent itself failed, e.g. its port was taken; both logged to PATH). End of input
ends the server; so does SIGTERM (during a launch torchelastic's handler first stops the ranks), which
it also gets when the process that started it dies. The launching side (``harness/scalegate/launch/warm.py``)
starts it, inside a private network namespace where there is one, and kills its whole tree on a
timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

# torch, the worker, and what every built-in torch-only strategy imports; optional packages (DeepSpeed,
# Lightning, transformers) come per case through --preload (harness/scalegate/launch/warm.py says why)
BASE_PRELOAD = (
    "torch",
    "torch.distributed",
    "torch.optim",
    "torch._dynamo",
    "torch.distributed.fsdp",
    "torch.distributed.pipelining",
    "torch.nn.parallel",
    "scalegate.worker",
    "scalegate.worker.loop",
    "scalegate.workloads",
)


_FORKSERVER_ENV: dict[str, str] = {}  # the environment the forkserver (so every rank) started with


def _preload(modules: list[str]) -> None:
    """Import here (so a failure is reported once, by name) and in the forkserver that forks the ranks."""
    import multiprocessing
    from multiprocessing import forkserver

    for name in modules:
        __import__(name)
    multiprocessing.set_forkserver_preload(list(modules))
    _FORKSERVER_ENV.update(os.environ)
    forkserver.ensure_running()  # the forkserver imports them now, not during the first launch


# what a fresh launch (a team's script) needs in the server: torchrun's own agent, nothing the ranks import
FRESH_PRELOAD = ("torch.distributed.run", "torch.distributed.launcher.api", "scalegate.worker.entry")


def _import_for_fresh() -> list[str]:
    """A server that only launches fresh ranks imports what ``_launch`` uses and starts no forkserver: its ranks import
    everything themselves, so the preload and the forkserver's own imports (about 5 s of CPU on the 2-core VMs,
    beside the session's first ranks) would be spent for nothing."""
    for name in FRESH_PRELOAD:
        __import__(name)
    return list(FRESH_PRELOAD)


def _launch(argv: list[str], env: dict[str, str], fresh: bool = False) -> int:
    """One launch. ``fresh`` (a team's script): the ranks are fresh interpreters started as torchrun starts them
    (its command as ``elastic_launch``'s entrypoint, in the launch's environment), not forked from the preloaded
    forkserver; only the agent's own start-up is saved (about 1.2 s a launch on the 2-core VMs)."""
    import dataclasses

    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    from scalegate.worker.entry import AGENT_PID_ENV, forked_main

    config, cmd, cmd_args = run.config_from_args(run.parse_args(argv))
    saved = dict(os.environ)
    try:
        if fresh:  # the ranks inherit this process's environment: the launch's own, as under a cold torchrun
            os.environ.clear()
            os.environ.update({**env, AGENT_PID_ENV: str(os.getpid())})  # the ranks die with this server
            elastic_launch(config, cmd)(*cmd_args)
        else:
            config = dataclasses.replace(config, start_method="forkserver")
            elastic_launch(config, forked_main)(cmd_args[-2], cmd_args[-1], env, _FORKSERVER_ENV)
    except ChildFailedError as exc:
        print(exc.format_msg(), file=sys.stderr)
        return 1
    finally:
        if fresh:
            os.environ.clear()
            os.environ.update(saved)
    return 0


def _redirected(log: str):
    """fds 1 and 2 into ``log`` for one launch (torchelastic logs there); returns a restore function."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)

    def restore() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])

    return restore


def serve(read_fd: int, write_fd: int) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException

    requests, replies = os.fdopen(read_fd, "r"), os.fdopen(write_fd, "w", buffering=1)
    for line in requests:
        request = json.loads(line)
        start = time.perf_counter()
        restore = _redirected(request["log"])
        try:
            code = _launch(request["argv"], request.get("env") or {}, bool(request.get("fresh")))
        except SignalException:  # SIGTERM from the launcher: the agent has stopped the ranks; we end too
            raise
        except Exception:  # a bad port, a bad argument: the launcher reads the log, the server lives on
            traceback.print_exc()
            code = 2
        finally:
            restore()
        replies.write(json.dumps({"returncode": code, "wall_s": time.perf_counter() - start}) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scalegate.worker.agent",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--fds", required=True, help="R,W: the request and reply pipes")
    parser.add_argument("--preload", default="", help="more modules to import before forking ranks")
    parser.add_argument(
        "--fresh-only", action="store_true", help="every launch's ranks start fresh: no preload, no forkserver"
    )
    args = parser.parse_args(argv)
    read_fd, write_fd = (int(x) for x in args.fds.split(","))
    try:
        if args.fresh_only:
            modules = _import_for_fresh()
        else:
            modules = list(dict.fromkeys([*BASE_PRELOAD, *filter(None, args.preload.split(","))]))
            _preload(modules)
    except Exception as exc:  # reported on the reply pipe, so the launcher can fall back to a cold torchrun
        traceback.print_exc()
        os.write(write_fd, (json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}) + "\n").encode())
        return 2
    hello = {"ready": True, "pid": os.getpid(), "modules": modules}
    print(f"agentserver ready: {json.dumps(hello)}", flush=True)
    os.write(write_fd, (json.dumps(hello) + "\n").encode())
    return serve(read_fd, write_fd)


if __name__ == "__main__":
    from scalegate.worker.ending import quick_exit

    quick_exit(main())  # the session waits for this exit: torch's teardown would add 0.5-1 s to its end
