"""SLURM agent mode: inside ``srun`` each node's pytest is the torchrun agent for its node.

    salloc -N2 --ntasks-per-node=1 --exclusive
    srun pytest scaling_tests -k fsdp        # one pytest per node, same cases in the same order

Everything comes from the step's environment (``detect()``): node rank from ``SLURM_NODEID``,
master = the first host of ``SLURM_JOB_NODELIST`` (expanded by ``expand_nodelist``, no
``scontrol`` needed), a port derived from the job, step and case ids (``case_port``) so every node
computes the same one without talking, and devices per node from the allocation (GPUs, else CPUs).
The run id is ``slurm-<job>.<step>`` so all nodes agree on the results directory.

Cases needing more nodes or devices than allocated skip with the same reason on every node
(``skip_reason``). Node 0 runs single-node cases alone and judges, writes and records every case;
the other nodes run their agent and report nothing. Rank results are read from the results
directory, so for multi-node cases it must be on a filesystem all nodes share (it is the
default ``results/`` under the checkout, which clusters usually share).
"""

from __future__ import annotations

import os
import re
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from scalegate.contract.errors import LaunchError, SpecError
from scalegate.contract.results import CaseResult, RankResult, aggregate
from scalegate.contract.spec import CaseSpec
from scalegate.contract.topology import Topology
from scalegate.launch import process
from scalegate.launch.local import LocalLauncher, first_failure

PORT_BASE, PORT_SPAN = 12000, 16000  # below Linux's ephemeral range (32768+)
WAIT_S = float(os.environ.get("SCALEGATE_SLURM_WAIT_S", 3600))  # how long a node waits for node 0


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


def case_port(job_id: str, step_id: str, case_id: str) -> int:
    """The same port on every node, different per case (and per job, for nodes shared by jobs)."""
    return PORT_BASE + zlib.crc32(f"{job_id}.{step_id}:{case_id}".encode()) % PORT_SPAN


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


def command(
    spec: CaseSpec,
    slurm: SlurmEnv,
    spec_path: Path,
    out_dir: Path,
    log_dir: Path,
    launcher: LocalLauncher | None = None,
) -> list[str]:
    """This node's torchrun agent for ``spec``: static rendezvous on the first host."""
    launcher = launcher or LocalLauncher()
    master = slurm.master if spec.topo.multi_node else "127.0.0.1"
    argv = LocalLauncher(python=launcher.python, master_addr=master).command(
        spec, spec_path, out_dir, case_port(slurm.job_id, slurm.step_id, spec.case_id), log_dir, node_rank=slurm.node_id
    )
    at = argv.index("torch.distributed.run") + 1
    # A node may reach a case long before node 0 is done with earlier single-node cases.
    return argv[:at] + ["--rdzv-conf", f"timeout={int(WAIT_S)}"] + argv[at:]


def run_agent(spec: CaseSpec, case_dir: Path, slurm: SlurmEnv, data_dir: str | None = None) -> CaseResult | None:
    """Run this node's agent; node 0 returns the aggregated result, other nodes None."""
    node_dir = case_dir / f"node{slurm.node_id}"  # logs apart: the results directory may be shared
    node_dir.mkdir(parents=True, exist_ok=True)
    spec_path = spec.write(node_dir / "spec.json")
    out_dir = case_dir / "ranks"
    argv = command(spec, slurm, spec_path, out_dir, node_dir / "logs")
    timeout = spec.timeout_s + (WAIT_S if slurm.node_id else 0)
    env = LocalLauncher().environment(spec, data_dir)
    done = process.run(argv, log_path=node_dir / "launcher.log", timeout_s=timeout, env=env)
    if done.timed_out:
        raise LaunchError(
            f"{spec.case_id} on node {slurm.node_id} ({slurm.nodes[slurm.node_id]}) timed out "
            f"after {timeout:.0f}s; its agent was killed",
            f"logs under {node_dir}",
        )
    if done.returncode != 0:
        raise LaunchError(
            f"{spec.case_id} failed on node {slurm.node_id} (torchrun exit code {done.returncode})\n"
            + first_failure(node_dir),
            f"logs of every node under {case_dir}/node*",
        )
    if slurm.node_id != 0:
        return None
    paths = [out_dir / f"rank{r}.json" for r in range(spec.world_size)]
    deadline = time.monotonic() + 30  # other nodes' files may reach a shared filesystem a little later
    while time.monotonic() < deadline and not all(p.exists() for p in paths):
        time.sleep(0.5)
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        raise LaunchError(
            f"{spec.case_id}: {', '.join(missing)} were written on other nodes and are not visible here",
            "put --scaling-results-dir on a filesystem every node of the allocation shares",
        )
    result = aggregate(spec, [RankResult.read(p) for p in paths], launch_wall_s=done.wall_s)
    from dataclasses import replace

    return replace(
        result,
        launch={
            **result.launch,
            "launcher": "slurm",
            "job_id": slurm.job_id,
            "nodes": list(slurm.nodes[: spec.topo.nodes]),
        },
    )
