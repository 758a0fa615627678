"""CPU binding (``--scaling-cpu-binding on``): on CPU devices each local rank gets cores of its own.

Two unbound ranks on a 2-core host are placed by the scheduler anew in every launch. Binding rank r
to cores ``[r*t, (r+1)*t)`` of the node's CPU set (t = threads per rank), as ``numactl``/``taskset``
per rank would, made DDP faster and a little steadier here (measured below), but did not remove the
spread between launches (docs/evidence/detection.md#several-launches-per-verdict-cpu-binding-paired-reference-steps).
A node's only rank (the 1x1 reference) is left alone: with no rank beside it, binding only stops it from leaving a
core that a neighbouring VM slows down (bound, the reference's spread between launches was 10% against 4%).

The node's CPU set is ``SCALEGATE_CPUS`` when a launcher sets it (emulated nodes share one machine,
so each gets its own slice; ``none`` turns binding off), else the process's own affinity (a SLURM
step's cpuset, a container's limit). Binding is skipped, and says why, when the ranks do not fit.
On CUDA devices nothing is bound here: that is torchrun's ``--numa-binding`` on GPU hosts.

In a duet (docs/duet.md) every rank is bound, whatever the option, the 1x1 reference's only rank too: rank r
of both sides then runs on the same cores, so a core that a neighbouring VM slows slows both sides' steps alike.
Left to the scheduler, each resident process kept a core of its own and with it a level of its own: two
processes taking turns on this VM, same training step, B/A step-time medians over 250 steps in 3 rounds each
(load 0.4-1.5): on different cores -1.2%, -13.8%, +19.8%; on the same core -0.5%, -2.8%, +0.8%
(15 rounds on one core: |B/A| <= 2.8%; experiments/duet_cores.py).

The worker binds its main thread *after* the process group exists (``sched_setaffinity`` on Linux
binds the calling thread and what it starts later): gloo's worker threads, started with the group,
stay free to run on any core. Binding the whole process first halved ``zero1-torch-resnet-1x2``
(148 vs 297-390 samples/s), whose many small broadcasts then queued behind compute on one core.

In a duet, gloo's worker threads (two a group, which run every collective's work) are then bound with the rank
too (``--scaling-duet-threads auto``, the default): left free, where they settle in a launch is a level of that
launch, different for the two sides. Whole A/A gates in turns of one, free against bound (2026-11-27, load 0.1-2.5):
the canaries' round spread 2.39% free, 1.68% bound (19 gates each; fsdp 2.83% against 1.94%, a replayed 5% drop
caught 84.3% against 99.7%). A strategy whose card says why (``duet_threads_free``: zero1-torch and ZeRO-3, whose
duet step at W binding slowed 2.4x and 1.6-1.8x) keeps them free, and so does a team's script, whose A/A rounds
spread no less bound (``SCRIPT_FREE``); ``bound`` or ``free`` chooses for every case.
The rank's result says which (``gloo_threads``), and the duet's verdict names it.

Off by default (``--scaling-cpu-binding on``): a process group a strategy creates after the binding
(Lightning Fabric's) still gets its threads on the rank's core, and fabric-ddp-resnet-1x2 ran at half
DDP's throughput bound (550 vs 1141 samples/s). DDP itself gains: 33.0 vs 36.6 ms median step and
5.1% vs 8.0% spread between launches (10 interleaved launches each,
docs/evidence/detection.md#several-launches-per-verdict-cpu-binding-paired-reference-steps).
"""

from __future__ import annotations

import os
from typing import Sequence

from scalegate.contract import cards

ENV = "SCALEGATE_CPUS"
# measured on the 2-core VMs (docs/evidence/duet.md#gloos-threads-bound-with-the-rank-by-default): the example script's whole A/A gates, free against bound
SCRIPT_FREE = (
    "a team's script: bound, the example script's A/A duet rounds spread no less (7 whole gates each way, "
    "interleaved: 2.03% free, 2.90% bound)"
)


def node_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def plan(cpus: Sequence[int], local_rank: int, local_world: int, threads: int) -> tuple[list[int] | None, str]:
    """The cores for one rank, or ``None`` with the reason binding is skipped."""
    need = local_world * threads
    if need > len(cpus):
        return None, f"{local_world} rank(s) x {threads} thread(s) need {need} cores, the node has {len(cpus)}"
    return list(cpus[local_rank * threads : (local_rank + 1) * threads]), ""


def node_slices(cpus: Sequence[int], nodes: int, per_node: int, threads: int) -> list[str]:
    """``SCALEGATE_CPUS`` per emulated node on one machine: disjoint slices, or ``none`` if they do not fit."""
    width = per_node * threads
    if nodes * width > len(cpus):
        return ["none"] * nodes
    return [",".join(str(c) for c in cpus[n * width : (n + 1) * width]) for n in range(nodes)]


def parse(text: str) -> list[int] | None:
    if text.strip().lower() in ("", "none", "off"):
        return None
    return [int(part) for part in text.split(",")]


def gloo_threads(choice: str, strategy: str, script: bool = False) -> tuple[bool, str]:
    """Whether a duet binds gloo's worker threads with the rank (``--scaling-duet-threads``), and why not where it
    does not. ``auto``: bound, unless the strategy's card says why not, or the ranks run a team's ``script``."""
    if choice == "bound":
        return True, ""
    if choice == "free":
        return False, "--scaling-duet-threads free"
    if script:
        return False, SCRIPT_FREE
    card = cards.CARDS.get(strategy)
    why = card.duet_threads_free if card else ""
    return (False, f"{strategy}: {why}") if why else (True, "")


def bind(
    threads: int, env: dict[str, str] | None = None, duet: bool = False, duet_threads: tuple[bool, str] = (True, "")
) -> dict[str, object]:
    """Bind this thread (and what it starts later) by ``LOCAL_RANK``/``LOCAL_WORLD_SIZE``; returns what was done,
    for the result. ``duet``: the rank takes turns with its partner's, whose rank of the same number binds alike;
    ``duet_threads`` (``gloo_threads``): whether the threads the process has now (gloo's) are bound with it."""
    env = os.environ if env is None else env
    if ENV in env:
        cpus = parse(env[ENV])
        if cpus is None:
            return {"cpus": None, "why": f"{ENV}={env[ENV]!r}: the launcher turned binding off"}
    else:
        cpus = node_cpus()
    local_rank, local_world = int(env.get("LOCAL_RANK", "0")), int(env.get("LOCAL_WORLD_SIZE", "1"))
    if local_world == 1 and ENV not in env and not duet:
        return {"cpus": None, "why": "the node's only rank: left to the scheduler"}
    mine, why = plan(cpus, local_rank, local_world, threads)
    if mine is None:
        return {"cpus": None, "why": why}
    os.sched_setaffinity(0, mine)
    if not duet:
        return {"cpus": mine, "why": ""}
    bound, free_why = duet_threads
    return {
        "cpus": mine,
        "why": "duet: both sides' rank on the same cores",
        "gloo_threads": f"bound ({_bind_threads(mine)} threads)" if bound else f"free: {free_why}",
    }


def _bind_threads(cpus: list[int]) -> int:
    """Every thread the process has now (gloo's, DDP's) onto ``cpus``; how many."""
    done = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
            done += 1
        except OSError:
            pass
    return done
