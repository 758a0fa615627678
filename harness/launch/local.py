"""Local launcher: one torchrun agent on this machine, static rendezvous on a free port."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.errors import LaunchError
from harness.launch import process, wirecount
from harness.results import CaseResult, RankResult, aggregate
from harness.spec import CaseSpec


@dataclass(frozen=True, kw_only=True)
class LocalLauncher:
    python: str = sys.executable
    master_addr: str = "127.0.0.1"

    def command(self, spec: CaseSpec, spec_path: Path, out_dir: Path, port: int, log_dir: Path,
                node_rank: int = 0) -> list[str]:
        topo = spec.topo
        return [
            self.python, "-m", "torch.distributed.run",
            "--nnodes", str(topo.nodes), "--node-rank", str(node_rank),
            "--nproc-per-node", str(topo.per_node),
            "--master-addr", self.master_addr, "--master-port", str(port),
            "--max-restarts", "0", "--monitor-interval", "0.5",
            "--log-dir", str(log_dir), "--redirects", "3",
            "-m", "harness.worker", str(spec_path), str(out_dir),
        ]

    def environment(self, spec: CaseSpec, data_dir: str | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = str(spec.cpu_threads)
        env["PYTHONUNBUFFERED"] = "1"
        env.pop("TORCHELASTIC_ERROR_FILE", None)  # torchrun sets one per rank; an inherited one would clash
        if data_dir:
            env["SCALEGATE_DATA_DIR"] = data_dir
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env


def run_case(spec: CaseSpec, case_dir: Path, launcher: LocalLauncher | None = None,
             data_dir: str | None = None) -> CaseResult:
    """Launch the case, wait for it within its timeout, and aggregate every rank's result."""
    launcher = launcher or LocalLauncher()
    case_dir.mkdir(parents=True, exist_ok=True)
    spec_path = spec.write(case_dir / "spec.json")
    out_dir = case_dir / "ranks"
    argv = launcher.command(spec, spec_path, out_dir, process.free_port(), case_dir / "logs")
    with wirecount.private_network(spec) as (prefix, wire_env):  # its own loopback counts its bytes
        done = process.run(prefix + argv, log_path=case_dir / "launcher.log", timeout_s=spec.timeout_s,
                           env={**launcher.environment(spec, data_dir), **wire_env})
    if done.timed_out:
        raise LaunchError(f"{spec.case_id} timed out after {spec.timeout_s:.0f}s; every process was killed",
                          f"raise --scaling-timeout, or read the rank logs under {case_dir / 'logs'}")
    if done.returncode != 0:
        raise LaunchError(f"{spec.case_id} failed (torchrun exit code {done.returncode})\n"
                          + first_failure(case_dir), f"full logs under {case_dir}")
    ranks = [RankResult.read(out_dir / f"rank{r}.json") for r in range(spec.world_size)]
    return aggregate(spec, ranks, launch_wall_s=done.wall_s)


def first_failure(case_dir: Path, tail_lines: int = 30) -> str:
    """The first failing rank's traceback: torchrun's error file if any, else the launcher log's tail."""
    import json

    for error_file in sorted(case_dir.glob("logs/**/error.json")):
        try:
            message = json.loads(error_file.read_text())["message"]
            trace = message.get("extraInfo", {}).get("py_callstack", "") if isinstance(message, dict) else message
            rank = error_file.parent.name
            return f"first failing rank (local {rank}) traceback:\n{trace}".rstrip()
        except (OSError, ValueError, KeyError, TypeError):
            continue
    log = case_dir / "launcher.log"
    lines = log.read_text(errors="replace").splitlines()[-tail_lines:] if log.exists() else []
    return "launcher log tail:\n" + "\n".join(lines)
