"""Local launcher: one torchrun agent on this machine, static rendezvous on a free port."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from scalegate.contract.errors import LaunchError
from scalegate.contract.results import CaseResult, RankResult, aggregate
from scalegate.contract.spec import CaseSpec
from scalegate.launch import hang, process, warm, wirecount


@dataclass(frozen=True, kw_only=True)
class LocalLauncher:
    python: str = sys.executable
    master_addr: str = "127.0.0.1"

    def command(
        self, spec: CaseSpec, spec_path: Path, out_dir: Path, port: int, log_dir: Path, node_rank: int = 0
    ) -> list[str]:
        return [
            self.python,
            "-m",
            "torch.distributed.run",
            *self.torchrun_args(spec, spec_path, out_dir, port, log_dir, node_rank),
        ]

    def torchrun_args(
        self, spec: CaseSpec, spec_path: Path, out_dir: Path, port: int, log_dir: Path, node_rank: int = 0
    ) -> list[str]:
        """torchrun's arguments: a cold ``python -m torch.distributed.run`` or the warm agent takes them."""
        topo = spec.topo
        return [
            "--nnodes",
            str(topo.nodes),
            "--node-rank",
            str(node_rank),
            "--nproc-per-node",
            str(topo.per_node),
            "--master-addr",
            self.master_addr,
            "--master-port",
            str(port),
            "--max-restarts",
            "0",
            "--monitor-interval",
            "0.1",
            "--log-dir",
            str(log_dir),
            "--redirects",
            "3",
            "-m",
            "scalegate.worker",
            str(spec_path),
            str(out_dir),
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


PORT_ATTEMPTS = 3  # a free port can be taken between our probe and torchrun's bind (pytest -n 2)


def run_case(
    spec: CaseSpec,
    case_dir: Path,
    launcher: LocalLauncher | None = None,
    data_dir: str | None = None,
    agents: "warm.AgentPool | None" = None,
) -> CaseResult:
    """Launch the case, wait for it within its timeout, and aggregate every rank's result.

    With ``agents`` the session's warm torchrun agent forks the ranks of a single-node case
    (harness/launch/warm.py); without, or where that agent cannot start (the result's ``launch["note"]``
    then says why), a fresh ``torchrun`` starts. A hang is diagnosed (heartbeats, every rank's stack)
    before the tree is killed; a crash reports the first failing rank's traceback; either way the error
    lists every rank's log.
    """
    launcher = launcher or LocalLauncher()
    case_dir = claim(case_dir)
    spec_path = spec.write(case_dir / "spec.json")
    out_dir = case_dir / "ranks"
    diagnosis: list[str] = []

    def on_timeout(pid: int) -> None:
        diagnosis.append(hang.diagnose(pid, out_dir, spec.world_size, case_dir))

    def warm_launch(port: int, log_dir: Path) -> process.Completed:
        args = launcher.torchrun_args(spec, spec_path, out_dir, port, log_dir)
        return agents.run(
            spec,
            args,
            log_path=case_dir / "launcher.log",
            timeout_s=spec.timeout_s,  # type: ignore[union-attr]
            env=launcher.environment(spec, data_dir),
            on_timeout=on_timeout,
        )

    launched, note = "torchrun", ""
    if agents is not None and not spec.topo.multi_node:
        try:
            done, launched = _with_port_retries(case_dir, warm_launch), "warm"
        except warm.AgentUnavailable as exc:  # the launcher's failure, not the case's: launch it cold
            note = f"launched with a cold torchrun: {exc.message}"
        except warm.AgentDied as exc:
            raise LaunchError(f"{spec.case_id}: {exc.message}\n{rank_logs(case_dir)}", exc.hint) from None
    if launched == "torchrun":
        with wirecount.private_network(spec) as (prefix, wire_env):  # its own loopback counts its bytes

            def cold_launch(port: int, log_dir: Path) -> process.Completed:
                argv = prefix + launcher.command(spec, spec_path, out_dir, port, log_dir)
                return process.run(
                    argv,
                    log_path=case_dir / "launcher.log",
                    timeout_s=spec.timeout_s,
                    env={**launcher.environment(spec, data_dir), **wire_env},
                    on_timeout=on_timeout,
                )

            done = _with_port_retries(case_dir, cold_launch)
    if done.timed_out:
        raise LaunchError(
            f"{spec.case_id} hung: no result after {spec.timeout_s:.0f}s, so every process was "
            f"killed\n{''.join(diagnosis)}\n{rank_logs(case_dir)}",
            "the rank(s) that stopped first are named above, with their stacks; "
            "raise --scaling-timeout only if the case is merely slow",
        )
    if done.returncode != 0:
        raise LaunchError(
            f"{spec.case_id} failed (torchrun exit code {done.returncode})\n"
            f"{first_failure(case_dir)}\n{rank_logs(case_dir)}",
            f"full logs under {case_dir}",
        )
    try:
        ranks = [RankResult.read(out_dir / f"rank{r}.json") for r in range(spec.world_size)]
        result = aggregate(spec, ranks, launch_wall_s=done.wall_s)
    except LaunchError as exc:
        raise LaunchError(
            f"{spec.case_id}: every rank exited 0, but {exc.message}\n{rank_logs(case_dir)}", exc.hint
        ) from None
    how = {"launcher": launched, **({"note": note} if note else {})}
    return dataclasses.replace(result, launch={**result.launch, **how})


def _with_port_retries(case_dir: Path, launch: Callable[[int, Path], process.Completed]) -> process.Completed:
    """``launch(port, log_dir)`` again, on a fresh port and log directory, while it loses its port to another
    process (torchrun's bind comes after our probe)."""
    for attempt in range(PORT_ATTEMPTS):
        log_dir = case_dir / ("logs" if attempt == 0 else f"logs-retry{attempt}")
        done = launch(process.free_port(), log_dir)
        if done.timed_out or done.returncode == 0 or not port_clash(case_dir / "launcher.log"):
            break
    return done


def claim(case_dir: Path) -> Path:
    """A fresh directory for this launch: ``case_dir``, or ``case_dir~2``... if another launch has it
    (pytest-xdist workers each measure the same 1x1 reference)."""
    case_dir.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        candidate = case_dir if n == 1 else case_dir.with_name(f"{case_dir.name}~{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise LaunchError(f"{case_dir} and 998 numbered siblings exist", "clean the results directory")


def port_clash(log: Path) -> bool:
    """Did the last launch in ``log`` lose its rendezvous port to another process?"""
    try:
        last = log.read_text(errors="replace").rsplit("\n$ ", 1)[-1].lower()
    except OSError:
        return False
    return "eaddrinuse" in last or "address already in use" in last


def rank_logs(case_dir: Path) -> str:
    logs = sorted(case_dir.glob("logs*/**/*.log"))
    listed = "\n".join(f"  {p}" + ("" if p.stat().st_size else " (empty)") for p in logs) or "  (none)"
    return f"rank logs:\n{listed}\n  {case_dir / 'launcher.log'}"


def first_failure(case_dir: Path, tail_lines: int = 30) -> str:
    """The first failing rank's traceback: the earliest torchrun error file, else the launcher log's tail."""
    failures = []
    for error_file in case_dir.glob("logs*/**/error.json"):
        try:
            message = json.loads(error_file.read_text())["message"]
            if isinstance(message, dict):
                trace = message.get("extraInfo", {}).get("py_callstack", "")
                stamp = float(message.get("extraInfo", {}).get("timestamp", 0) or 0)
            else:
                trace, stamp = str(message), 0.0
            # torchelastic stamps whole seconds: a rank that lost its peer often shares the crashing rank's
            # second, so the file's own time (ns) breaks the tie
            failures.append((stamp, error_file.stat().st_mtime_ns, str(error_file), error_file.parent.name, trace))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    if failures:  # later failures are usually other ranks losing their peer
        _, _, path, rank, trace = min(failures)
        return f"first failing rank (local {rank}) traceback, from {path}:\n{trace}".rstrip()
    log = case_dir / "launcher.log"
    lines = log.read_text(errors="replace").splitlines()[-tail_lines:] if log.exists() else []
    return "launcher log tail:\n" + "\n".join(lines)
