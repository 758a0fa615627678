"""The cluster this process runs in, read from its environment (as Lightning's ``ClusterEnvironment.detect()``).

Under ``srun`` every node's pytest is the torchrun agent for its node (``harness/scalegate/launch/slurm.py``); what
that needs is read here, before anything launches, so the matrix can skip what the allocation cannot run
with the same reason on every node: node rank from ``SLURM_NODEID``, the nodes from ``SLURM_JOB_NODELIST``
(expanded by ``expand_nodelist``, no ``scontrol`` needed), devices per node from the allocation (GPUs,
else CPUs), and a run id every node agrees on. Outside ``srun`` ``detect()`` is None and nothing changes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping

from scalegate.contract.errors import SpecError
from scalegate.contract.topology import Topology


@dataclass(frozen=True, kw_only=True)
class SlurmEnv:
    job_id: str
    step_id: str
    node_id: int
    nodes: tuple[str, ...]  # expanded SLURM_JOB_NODELIST, node rank order
    cpus_on_node: int
    gpus_on_node: int

    @property
    def nnodes(self) -> int:
        return len(self.nodes)

    @property
    def master(self) -> str:
        return self.nodes[0]

    @property
    def run_id(self) -> str:
        return f"slurm-{self.job_id}.{self.step_id}"


def expand_nodelist(text: str) -> list[str]:
    """``"gpu[01-03,7],login-2"`` -> ``["gpu01", "gpu02", "gpu03", "gpu7", "login-2"]`` (zero padding kept)."""
    hosts: list[str] = []
    for part in _split_top(text.strip()):
        expanded = [""]
        for literal, ranges in re.findall(r"([^\[\]]*)(?:\[([^\]]*)\])?", part):
            if not literal and not ranges:
                continue
            items = _ranges(ranges, text) if ranges else [""]
            expanded = [e + literal + i for e in expanded for i in items]
        hosts.extend(expanded)
    if not hosts or any(not h or "[" in h or "]" in h for h in hosts):
        raise SpecError(f"cannot parse SLURM nodelist {text!r}", "expected host names like node[01-04],gpu7")
    return hosts


def _split_top(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0:
            break
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if depth != 0:  # also a "]" before its "["
        raise SpecError(f"unbalanced brackets in SLURM nodelist {text!r}", "expected e.g. node[01-04]")
    return [p for p in parts + [current] if p]


def _ranges(spec: str, text: str) -> list[str]:
    out = []
    for item in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", item.strip())
        if not match:
            raise SpecError(f"bad range {item!r} in SLURM nodelist {text!r}", "expected e.g. node[01-04,07]")
        lo, hi = match.group(1), match.group(2) or match.group(1)
        out.extend(str(n).zfill(len(lo)) for n in range(int(lo), int(hi) + 1))
    return out


def _count(value: str | None) -> int:
    """``"4"``, ``"2(x3)"`` (per node) or a GPU list ``"0,1"``/``"gpu:a100:2"``."""
    if not value:
        return 0
    head = value.split("(")[0]
    if "," in head:
        return len(head.split(","))
    digits = re.findall(r"\d+", head.split(":")[-1])
    return int(digits[0]) if digits else 0


def detect(environ: Mapping[str, str] | None = None) -> SlurmEnv | None:
    """The SLURM step this process runs in, or None outside ``srun`` (then nothing changes)."""
    env = os.environ if environ is None else environ
    if not env.get("SLURM_JOB_ID") or not env.get("SLURM_STEP_ID") or "SLURM_NODEID" not in env:
        return None
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST", "")
    nodes = tuple(expand_nodelist(nodelist))
    tasks, step_nodes = env.get("SLURM_STEP_NUM_TASKS"), env.get("SLURM_STEP_NUM_NODES")
    if tasks and step_nodes and tasks != step_nodes:
        raise SpecError(
            f"srun started {tasks} tasks on {step_nodes} nodes: agent mode needs one pytest per node",
            "run `srun --ntasks-per-node=1 pytest scaling_tests ...`",
        )
    gpus = _count(env.get("SLURM_GPUS_ON_NODE")) or _count(env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS"))
    cpus = _count(env.get("SLURM_CPUS_ON_NODE")) or _count(env.get("SLURM_JOB_CPUS_PER_NODE")) or 1
    return SlurmEnv(
        job_id=env["SLURM_JOB_ID"],
        step_id=env["SLURM_STEP_ID"],
        node_id=int(env["SLURM_NODEID"]),
        nodes=nodes,
        cpus_on_node=cpus,
        gpus_on_node=gpus,
    )


def skip_reason(topo: Topology, device: str, slurm: SlurmEnv | None) -> str | None:
    """The same answer on every node of the allocation."""
    if slurm is None:
        return None
    if topo.nodes > slurm.nnodes:
        return f"topology {topo} needs {topo.nodes} nodes, the SLURM allocation has {slurm.nnodes}"
    have, what = (slurm.gpus_on_node, "GPUs") if device == "cuda" else (slurm.cpus_on_node, "CPUs")
    if topo.per_node > have:
        return (
            f"topology {topo} needs {topo.per_node} processes per node, the allocation has {have} {what} "
            f"per node (ask for more: --exclusive, or -c/--gpus-per-node)"
        )
    return None
