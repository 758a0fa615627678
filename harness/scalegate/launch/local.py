"""The cold launcher (``--scaling-launcher torchrun``): a fresh torchrun agent per launch on this machine,
static rendezvous on a free loopback port, in a private network namespace that counts its bytes on the wire.

    TorchrunLauncher(Settings(data_dir=...)).run(spec, case_dir) -> CaseResult
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from scalegate.contract.errors import LaunchError
from scalegate.contract.results import CaseResult
from scalegate.contract.spec import CaseSpec
from scalegate.launch import hang, process, wirecount
from scalegate.launch.base import Job, Launcher, collect, first_failure, rank_logs, register_launcher

PORT_ATTEMPTS = 3  # a free port can be taken between our probe and torchrun's bind (pytest -n 2)


@dataclass
class Launch:
    """One launch of a single-node case: its own directory, its spec file, and a hang's diagnosis."""

    spec: CaseSpec
    case_dir: Path
    spec_path: Path
    out_dir: Path
    diagnosis: list[str] = field(default_factory=list)

    @classmethod
    def claim(cls, spec: CaseSpec, case_dir: Path) -> Launch:
        case_dir = claim(case_dir)
        return cls(
            spec=spec, case_dir=case_dir, spec_path=spec.write(case_dir / "spec.json"), out_dir=case_dir / "ranks"
        )

    def job(self, port: int, log_dir: Path) -> Job:
        return Job(spec=self.spec, spec_path=self.spec_path, out_dir=self.out_dir, log_dir=log_dir, port=port)

    def on_timeout(self, pid: int) -> None:
        """Heartbeats and every rank's stack, while the tree is still alive to be looked at."""
        self.diagnosis.append(hang.diagnose(pid, self.out_dir, self.spec.world_size, self.case_dir))


@register_launcher("torchrun")
class TorchrunLauncher(Launcher):
    """A cold ``python -m torch.distributed.run`` per launch (~6 s before the first step)."""

    def command(self, job: Job) -> list[str]:
        return self.torchrun(job)

    def run(self, spec: CaseSpec, case_dir: Path) -> CaseResult:
        """Launch the case, wait for it within its timeout, and aggregate every rank's result.

        A hang is diagnosed (heartbeats, every rank's stack) before the tree is killed; a crash reports the
        first failing rank's traceback; either way the error lists every rank's log.
        """
        launch = Launch.claim(spec, case_dir)
        return self.finish(launch, self.cold(launch), {"launcher": "torchrun"})

    def cold(self, launch: Launch) -> process.Completed:
        """A fresh torchrun, also where a subclass's ``command`` is something else (the warm agent's arguments)."""
        spec = launch.spec
        with wirecount.private_network(spec) as (prefix, wire_env):  # its own loopback counts its bytes

            def once(port: int, log_dir: Path) -> process.Completed:
                return process.run(
                    prefix + self.torchrun(launch.job(port, log_dir)),
                    log_path=launch.case_dir / "launcher.log",
                    timeout_s=spec.execution.timeout_s,
                    env={**self.environment(spec), **wire_env},
                    on_timeout=launch.on_timeout,
                )

            return with_port_retries(launch.case_dir, once)

    @staticmethod
    def finish(launch: Launch, done: process.Completed, how: dict[str, Any]) -> CaseResult:
        """The case's result, with ``how`` it launched in ``result.launch``; a hang or a crash raises LaunchError."""
        spec, case_dir = launch.spec, launch.case_dir
        if done.timed_out:
            raise LaunchError(
                f"{spec.case_id} hung: no result after {spec.execution.timeout_s:.0f}s, so every process was "
                f"killed\n{''.join(launch.diagnosis)}\n{rank_logs(case_dir)}",
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
            result = collect(spec, launch.out_dir, done.wall_s)
        except LaunchError as exc:
            raise LaunchError(
                f"{spec.case_id}: every rank exited 0, but {exc.message}\n{rank_logs(case_dir)}", exc.hint
            ) from None
        return dataclasses.replace(result, launch={**result.launch, **how})


def with_port_retries(case_dir: Path, launch: Callable[[int, Path], process.Completed]) -> process.Completed:
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
