"""CPU binding, the shapes both sides share: a node's CPU set, each local rank's slice of it, and whether gloo's
worker threads are bound with the rank in a duet. The binding itself happens in the rank (measure/binding.py).

On CPU devices rank r of a node gets cores ``[r*t, (r+1)*t)`` of the node's CPU set (t = threads per rank), as
``numactl``/``taskset`` per rank would. The node's CPU set is ``SCALEGATE_CPUS`` when a launcher sets it (emulated
nodes share one machine, so each gets its own slice; ``none`` turns binding off), else the process's own affinity
(a SLURM step's cpuset, a container's limit). On CUDA devices nothing is bound: that is torchrun's ``--numa-binding``.
Why and what it changes: docs/evidence/detection.md#several-launches-per-verdict-cpu-binding-paired-reference-steps
and docs/evidence/duet.md#gloos-threads-bound-with-the-rank-by-default.
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
