"""Launchers turn a case into argument lists and run them; they never import the worker side.

One protocol (``base.Launcher``), one file per launcher, each registered by name: ``torchrun`` (local.py, a
cold torchrun per launch), ``warm`` (warm.py, the session's warm agent), ``emulated`` (emulated.py, nodes as
network namespaces) and ``slurm`` (slurm.py, this node's agent under srun). Every module of this package is
imported here, so a launcher in a new file registers itself.

    name = launch.choose(spec, cluster.detect(), "warm")   # "warm", "torchrun", "emulated" or "slurm"
    result = launch.get(name)(launch.Settings(agents=pool)).run(spec, case_dir)
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import TYPE_CHECKING

from scalegate.contract.results import CaseResult
from scalegate.contract.spec import CaseSpec
from scalegate.launch.base import Job, Launcher, Settings, choose, get, names, register_launcher

if TYPE_CHECKING:
    from scalegate.launch.warm import AgentPool

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def run_case(
    spec: CaseSpec,
    case_dir: Path,
    *,
    data_dir: str | None = None,
    agents: AgentPool | None = None,
    link_rate: str = "1gbit",
) -> CaseResult:
    """Run one case as a session outside SLURM would: warm with ``agents``, else a cold torchrun; emulated
    nodes for a multi-node case."""
    from scalegate.plan import probe  # zero-gradient elements and the output check, as the session does

    spec = probe.prepare(spec, data_dir)
    name = choose(spec, None, "warm" if agents is not None else "torchrun")
    launcher = get(name)(Settings(data_dir=data_dir, agents=agents, link_rate=link_rate))
    return launcher.run(spec, case_dir)  # type: ignore[return-value]  # None: SLURM nodes 1.., never chosen here


__all__ = ["Job", "Launcher", "Settings", "choose", "get", "names", "register_launcher", "run_case"]
