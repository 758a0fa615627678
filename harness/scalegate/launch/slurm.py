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
from dataclasses import replace
from pathlib import Path

from scalegate.contract.errors import LaunchError
from scalegate.contract.results import CaseResult
from scalegate.contract.spec import CaseSpec
from scalegate.launch import process
from scalegate.launch.base import Job, Launcher, collect, first_failure, register_launcher
from scalegate.plan.cluster import SlurmEnv

PORT_BASE, PORT_SPAN = 12000, 16000  # below Linux's ephemeral range (32768+)
WAIT_S = float(os.environ.get("SCALEGATE_SLURM_WAIT_S", 3600))  # how long a node waits for node 0
SHARED_FS_WAIT_S = 30  # other nodes' rank files may reach a shared filesystem a little later


def case_port(job_id: str, step_id: str, case_id: str) -> int:
    """The same port on every node, different per case (and per job, for nodes shared by jobs)."""
    return PORT_BASE + zlib.crc32(f"{job_id}.{step_id}:{case_id}".encode()) % PORT_SPAN


@register_launcher("slurm")
class SlurmLauncher(Launcher):
    """This node's torchrun agent for a multi-node case under ``srun`` (``Settings.slurm``, the step)."""

    @property
    def slurm(self) -> SlurmEnv:
        if self.settings.slurm is None:
            raise LaunchError(
                "the slurm launcher runs one torchrun agent per node of an srun step, and this process is not in one",
                "run `srun --ntasks-per-node=1 pytest scaling_tests ...` inside an allocation",
            )
        return self.settings.slurm

    def job(self, spec: CaseSpec, spec_path: Path, out_dir: Path, log_dir: Path) -> Job:
        """Static rendezvous on the first host, on a port every node derives alone (``case_port``)."""
        slurm = self.slurm
        return Job(
            spec=spec,
            spec_path=spec_path,
            out_dir=out_dir,
            log_dir=log_dir,
            # an A/B gate's two sides run the same case at once on the same nodes: a port for each side
            port=case_port(
                slurm.job_id, slurm.step_id, f"{spec.duet.side}:{spec.case_id}" if spec.duet.address else spec.case_id
            ),
            node_rank=slurm.node_id,
            master_addr=slurm.master if spec.topo.multi_node else "127.0.0.1",
        )

    def command(self, job: Job) -> list[str]:
        argv = self.torchrun(job)
        at = argv.index("torch.distributed.run") + 1
        # A node may reach a case long before node 0 is done with earlier single-node cases.
        return argv[:at] + ["--rdzv-conf", f"timeout={int(WAIT_S)}"] + argv[at:]

    def run(self, spec: CaseSpec, case_dir: Path) -> CaseResult | None:
        """Run this node's agent; node 0 returns the aggregated result, other nodes None."""
        slurm = self.slurm
        node_dir = case_dir / f"node{slurm.node_id}"  # logs apart: the results directory may be shared
        node_dir.mkdir(parents=True, exist_ok=True)
        out_dir = case_dir / "ranks"
        job = self.job(spec, spec.write(node_dir / "spec.json"), out_dir, node_dir / "logs")
        timeout = spec.execution.timeout_s + (WAIT_S if slurm.node_id else 0)
        done = process.run(
            self.command(job), log_path=node_dir / "launcher.log", timeout_s=timeout, env=self.environment(spec)
        )
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
        _wait_for_ranks(spec, out_dir)
        result = collect(spec, out_dir, done.wall_s)
        how = {"launcher": "slurm", "job_id": slurm.job_id, "nodes": list(slurm.nodes[: spec.topo.nodes])}
        return replace(result, launch={**result.launch, **how})


def _wait_for_ranks(spec: CaseSpec, out_dir: Path) -> None:
    """Until every rank's file is visible here; raises LaunchError naming those that are not."""
    paths = [out_dir / f"rank{r}.json" for r in range(spec.world_size)]
    deadline = time.monotonic() + SHARED_FS_WAIT_S
    while time.monotonic() < deadline and not all(p.exists() for p in paths):
        time.sleep(0.5)
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        raise LaunchError(
            f"{spec.case_id}: {', '.join(missing)} were written on other nodes and are not visible here",
            "put --scaling-results-dir on a filesystem every node of the allocation shares",
        )
