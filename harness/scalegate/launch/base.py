"""One launcher protocol: a launcher turns a job into an argument list, runs a case, and aggregates its ranks.

The shape is ReFrame's (``core/launchers``): one small class per launcher, one file each, registered by
name, over an abstract ``command(job) -> list[str]`` that never builds a shell string::

    @register_launcher("torchrun")
    class TorchrunLauncher(Launcher):
        def command(self, job: Job) -> list[str]:
            return self.torchrun(job)

        def run(self, spec: CaseSpec, case_dir: Path) -> CaseResult: ...

Importing ``scalegate.launch`` imports every module of the package, so a new launcher is one file. The
session asks ``choose`` for a name and calls ``get(name)(settings).run(spec, case_dir)``; every launcher
reads from ``Settings`` what it needs (the warm agent, the link rate, the SLURM step).
"""

from __future__ import annotations

import abc
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar, TypeVar

from scalegate.contract import checkout
from scalegate.contract.errors import LaunchError, SpecError
from scalegate.contract.results import CaseResult, RankResult, aggregate
from scalegate.contract.spec import CaseSpec
from scalegate.plan.cluster import SlurmEnv

if TYPE_CHECKING:  # warm.py registers a launcher of its own, so it imports this module
    from scalegate.launch.warm import AgentPool


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What a session gives every launcher; each reads only what it needs."""

    python: str = sys.executable
    data_dir: str | None = None  # the ranks' SCALEGATE_DATA_DIR (--scaling-data-dir)
    link_rate: str = "1gbit"  # each emulated node's link (--scaling-link-rate)
    agents: AgentPool | None = None  # the session's warm torchrun agent (--scaling-launcher warm)
    slurm: SlurmEnv | None = None  # the srun step this process is a node of


@dataclass(frozen=True, kw_only=True)
class Job:
    """One torchrun agent's part of a case: what ``Launcher.command`` turns into an argument list."""

    spec: CaseSpec
    spec_path: Path
    out_dir: Path  # every rank writes rank<r>.json here
    log_dir: Path  # torchrun's per-rank logs and error files
    port: int
    node_rank: int = 0
    master_addr: str = "127.0.0.1"


class Launcher(abc.ABC):
    """Starts a case's torchrun agent(s) and turns what the ranks wrote into one ``CaseResult``."""

    name: ClassVar[str] = ""  # set by @register_launcher

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()

    @abc.abstractmethod
    def command(self, job: Job) -> list[str]:
        """The argument list that starts ``job``, never a shell string."""

    @abc.abstractmethod
    def run(self, spec: CaseSpec, case_dir: Path) -> CaseResult | None:
        """Launch the case under ``case_dir``, wait within its timeout, and aggregate every rank's result.

        Raises ``LaunchError`` (a hang, a crash, a missing rank result) with the logs to read. Returns None only
        where another process reports the case (SLURM nodes 1..: node 0 aggregates).
        """

    def torchrun(self, job: Job) -> list[str]:
        """A cold ``python -m torch.distributed.run`` for ``job``."""
        return [self.settings.python, "-m", "torch.distributed.run", *self.torchrun_args(job)]

    @staticmethod
    def torchrun_args(job: Job) -> list[str]:
        """torchrun's arguments: a cold ``python -m torch.distributed.run`` or the warm agent takes them."""
        topo = job.spec.topo
        return [
            "--nnodes",
            str(topo.nodes),
            "--node-rank",
            str(job.node_rank),
            "--nproc-per-node",
            str(topo.per_node),
            "--master-addr",
            job.master_addr,
            "--master-port",
            str(job.port),
            "--max-restarts",
            "0",
            "--monitor-interval",
            "0.1",
            "--log-dir",
            str(job.log_dir),
            "--redirects",
            "3",
            "-m",
            "scalegate.worker",
            str(job.spec_path),
            str(job.out_dir),
        ]

    def environment(self, spec: CaseSpec) -> dict[str, str]:
        """The agent's environment: this one, the case's thread count, the checkout on PYTHONPATH."""
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = str(spec.run.cpu_threads)
        env["PYTHONUNBUFFERED"] = "1"
        env.pop("TORCHELASTIC_ERROR_FILE", None)  # torchrun sets one per rank; an inherited one would clash
        if self.settings.data_dir:
            env["SCALEGATE_DATA_DIR"] = self.settings.data_dir
        return extensions(checkout.environment(env))  # the ranks import the scalegate this session imported


def extensions(env: dict[str, str]) -> dict[str, str]:
    """DeepSpeed's JIT-built ops (its CPU comm op) in this environment's own cache, where setup.sh built them, not
    in ~/.cache/torch_extensions shared by every venv (which each venv at another path would build again)."""
    env.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions"))
    return env


_REGISTRY: dict[str, type[Launcher]] = {}
L = TypeVar("L", bound=type[Launcher])


def register_launcher(name: str) -> Callable[[L], L]:
    """Class decorator: ``get(name)`` returns the class from now on."""

    def register(cls: L) -> L:
        known = _REGISTRY.get(name)
        if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
            raise LaunchError(
                f"launcher name {name!r} is taken by {known.__module__}.{known.__qualname__}",
                f"register {cls.__module__}.{cls.__qualname__} under a name of its own",
            )
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return register


def get(name: str) -> type[Launcher]:
    if name not in _REGISTRY:
        raise SpecError(f"unknown launcher {name!r}", f"pick one of: {', '.join(names())}")
    return _REGISTRY[name]


def names() -> list[str]:
    return list(_REGISTRY)


def choose(spec: CaseSpec, slurm: SlurmEnv | None, launcher: str) -> str:
    """The launcher for ``spec``: multi-node cases by where they run, single-node ones by ``--scaling-launcher``
    (also under srun, where node 0 runs them alone)."""
    if spec.topo.multi_node:
        return "slurm" if slurm is not None else "emulated"
    return launcher  # a team's script too: the warm agent starts its ranks fresh (launch/warm.py says why)


def collect(spec: CaseSpec, out_dir: Path, wall_s: float) -> CaseResult:
    """Every rank's ``rank<r>.json`` under ``out_dir``, aggregated; a missing or bad one raises LaunchError."""
    ranks = [RankResult.read(out_dir / f"rank{r}.json") for r in range(spec.world_size)]
    return aggregate(spec, ranks, launch_wall_s=wall_s)


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
