"""Binding a rank to its cores (``--scaling-cpu-binding on``, and every rank in a duet): the rank's side of
contract/affinity.py.

A node's only rank (the 1x1 reference) is left alone unless it is in a duet: with no rank beside it, binding only
stops it from leaving a core a neighbouring VM slows down. In a duet every rank is bound, so rank r of both sides
runs on the same cores and a slowed core slows both sides alike. The worker binds its main thread *after* the process
group exists (``sched_setaffinity`` on Linux binds the calling thread and what it starts later), so gloo's worker
threads stay free unless the duet binds them too (``gloo_threads``); a process group a strategy creates after the
binding (Lightning Fabric's) gets its threads on the rank's core. The evidence: contract/affinity.py's links.
"""

from __future__ import annotations

import os

from scalegate.contract.affinity import ENV, node_cpus, parse, plan


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
