"""SLURM agent mode: inside ``srun`` each node's pytest is the torchrun agent for its node.

    salloc -N2 --ntasks-per-node=1 --exclusive
    srun pytest scaling_tests -k fsdp        # one pytest per node, same cases in the same order

Everything comes from the step's environment (``scalegate.plan.cluster.detect()``): node rank from
``SLURM_NODEID``, master = the first host of ``SLURM_JOB_NODELIST``, and a port derived from the job,
step and case ids (``case_port``) so every node computes the same one without talking. The run id is
``slurm-<job>.<step>`` so all nodes agree on the results directory.

Cases needing more nodes or devices than allocated skip with the same reason on every node
(``cluster.skip_reason``, when the matrix is built). Node 0 runs single-node cases alone and judges,
writes and records every case; the other nodes run their agent and report nothing. Rank results are
read from the results directory, so for multi-node cases it must be on a filesystem all nodes share
(it is the default ``results/`` under the checkout, which clusters usually share).
"""

from __future__ import annotations

import os
import time
import zlib
from pathlib import Path

from scalegate.contract.errors import LaunchError
from scalegate.contract.results import CaseResult, RankResult, aggregate
from scalegate.contract.spec import CaseSpec
from scalegate.launch import process
from scalegate.launch.local import LocalLauncher, first_failure
from scalegate.plan.cluster import SlurmEnv

PORT_BASE, PORT_SPAN = 12000, 16000  # below Linux's ephemeral range (32768+)
WAIT_S = float(os.environ.get("SCALEGATE_SLURM_WAIT_S", 3600))  # how long a node waits for node 0


def case_port(job_id: str, step_id: str, case_id: str) -> int:
    """The same port on every node, different per case (and per job, for nodes shared by jobs)."""
    return PORT_BASE + zlib.crc32(f"{job_id}.{step_id}:{case_id}".encode()) % PORT_SPAN


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
