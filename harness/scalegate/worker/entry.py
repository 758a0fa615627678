"""Worker entry point, one per rank: ``python -m scalegate.worker SPEC.json OUT_DIR``.

Rank, world size and device come from the environment, so the same command runs under torchrun on
one machine, under each node's torchrun agent in a SLURM allocation, or on its own as rank 0 of 1:

    python -m scalegate.worker spec.json out/                       # one process
    torchrun --nproc-per-node 2 -m scalegate.worker spec.json out/  # two ranks on this node

``forked_main`` is the same entry as a function, for the warm agent (``harness/scalegate/worker/agent.py``).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from scalegate.contract import affinity, atomic, heartbeat
from scalegate.contract.spec import CaseSpec
from scalegate.measure import binding, turns
from scalegate.worker import script
from scalegate.worker.loop import rank_context, train

# A team's script's rank that the warm agent started as a fresh interpreter (worker/agent.py ``fresh``): the agent's
# pid, so the rank dies with it. Its ranks start in sessions of their own (torchelastic's start_new_session), so a
# server SIGKILLed from outside would leave them running, as a cold torchrun's are; forked ranks die with the forkserver.
AGENT_PID_ENV = "SCALEGATE_AGENT_PID"


def die_with(parent: int) -> None:
    """SIGKILL this rank when ``parent`` exits (PR_SET_PDEATHSIG), and exit now if it already has."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    if os.getppid() != parent:  # it died before the line above
        os._exit(1)


@record
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    agent = os.environ.pop(AGENT_PID_ENV, None)  # popped: the team's script sees torchrun's environment
    if agent:
        die_with(int(agent))
    if len(argv) != 2:
        print("usage: python -m scalegate.worker SPEC.json OUT_DIR", file=sys.stderr)
        return 2
    spec = CaseSpec.read(Path(argv[0]))
    out_dir = Path(argv[1])
    # a gate --base round's pairing (docs/duet.md): the rank's first turn comes before it touches its device, so a
    # job that waits for its turn holds no device memory (the alternate pairing); a no-op outside a gate
    env = os.environ
    rank, world, node = int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), int(env.get("GROUP_RANK", 0))
    device: list[torch.device] = []  # the rank's, once it has one: a turn is given back after its kernels ran

    def sync() -> None:
        if device and device[0].type == "cuda":
            torch.cuda.synchronize(device[0])

    beats = heartbeat.Writer(out_dir, rank)
    beats.beat(-1, "waiting for its first turn")
    turns.start(spec, out_dir, rank, world, sync, node).turn(-1)
    ctx = rank_context(spec)
    device.append(ctx.device)
    if ctx.device.type == "cpu":
        torch.set_num_threads(spec.run.cpu_threads)
    beats.beat(-1, "start")
    # The py-spy fallback: on SIGUSR1 every thread's stack goes to a file the launcher reads before a kill.
    stack_file = open(heartbeat.stack_path(out_dir, ctx.rank), "w")
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    try:
        if spec.script is not None:  # a team's own script: it makes its own process group (scalegate/worker/script.py)
            script.run(spec, ctx, out_dir, beats.beat)
            turns.ACTIVE.leave(-1)
            return 0
        # Under torchrun (MASTER_ADDR set) a process group exists even for one rank, as DDP on 1x1 needs.
        if (ctx.world_size > 1 or "MASTER_ADDR" in os.environ) and not dist.is_initialized():
            beats.beat(-1, "init_process_group")
            dist.init_process_group(
                backend="nccl" if ctx.device.type == "cuda" else "gloo",
                device_id=ctx.device if ctx.device.type == "cuda" else None,
            )
        bound: dict = {"cpus": None, "why": "cuda: see torchrun --numa-binding"}
        if ctx.device.type == "cpu":  # after the process group: gloo's own threads stay free, outside a duet
            paired = turns.ACTIVE.paired  # a duet binds both sides' rank r alike, and gloo's threads by its choice
            threads = affinity.gloo_threads(spec.duet.threads, spec.strategy)
            bound = (
                binding.bind(spec.run.cpu_threads, duet=paired, duet_threads=threads)
                if spec.execution.cpu_binding or paired
                else {"cpus": None, "why": "off"}
            )
        result = train(spec, ctx, os.environ.get("SCALEGATE_DATA_DIR") or None, beats.beat)
        result.extra["cpu_binding"] = bound
        _write_result(spec, ctx.rank, out_dir / f"rank{ctx.rank}.json", result.__dict__)
        turns.ACTIVE.leave(-1)  # after the result: its last turn holds every window after the steps
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


def forked_main(spec_path: str, out_dir: str, env: dict[str, str], inherited: dict[str, str]) -> int:
    """The same rank, as a function: the warm agent's forkserver forks it (harness/scalegate/worker/agent.py).

    ``env`` is the launch's environment (what a cold torchrun would have inherited: data directory, wire
    counter, threads), ``inherited`` the environment the forkserver started with. The rank gets ``env`` plus
    what torchrun's agent set for it (RANK, MASTER_PORT, TORCHELASTIC_ERROR_FILE...: whatever differs from
    ``inherited``), and nothing left over from the session's start, as under a cold torchrun.
    """
    from multiprocessing import forkserver

    # The forkserver exits when the agent dies (killed, out of memory) and the rank must go with it. The
    # forkserver waits for EOF on a pipe whose write end the agent holds and multiprocessing hands to every
    # process it forks: a rank keeping its copy would keep the forkserver, and so itself, alive.
    alive_fd = forkserver._forkserver._forkserver_alive_fd  # type: ignore[attr-defined]
    if alive_fd is not None:
        os.close(alive_fd)
        forkserver._forkserver._forkserver_alive_fd = None  # type: ignore[attr-defined]
    die_with(os.getppid())
    from_agent = {k: v for k, v in os.environ.items() if inherited.get(k) != v}
    os.environ.clear()
    os.environ.update({**env, **from_agent})
    return main.__wrapped__([spec_path, out_dir])  # torchelastic already wraps this function in @record


def _write_result(spec: CaseSpec, rank: int, path: Path, data: dict) -> None:
    if rank == spec.faults.no_result_rank:
        return  # injected fault: exit 0 without a result
    if rank == spec.faults.bad_result_rank:
        path.write_text('{"rank": ' + str(rank) + ', "step_times_s": [0.1, ')  # injected fault: truncated JSON
        return
    atomic.write_json(path, data)
