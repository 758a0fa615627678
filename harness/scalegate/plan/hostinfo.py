"""What this machine is: the hardware fingerprint that names a baseline profile, and provenance."""

from __future__ import annotations

import functools
import os
import platform
import re
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, kw_only=True)
class HostInfo:
    device: str  # "cuda" or "cpu"
    device_name: str  # GPU model or CPU model
    devices_per_node: int  # GPUs, or usable CPU cores
    cpu_model: str
    cpu_cores: int
    torch: str
    cuda: str
    nccl: str
    hostname: str

    @property
    def profile(self) -> str:
        """Baseline profile name: device model and count per node, and the software that times it."""
        name = _slug(self.device_name)
        if self.device == "cuda":
            return f"cuda-{name}-x{self.devices_per_node}-torch{self.torch}-cuda{self.cuda}-nccl{self.nccl}"
        return f"cpu-{name}-{self.cpu_cores}c-torch{self.torch}"

    def fingerprint(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "hostname"}

    @property
    def host_id(self) -> str:
        """This machine since its last boot: the stored gate widens its band for a baseline recorded on any
        other (docs/gate.md). The hostname alone does not tell machines apart: every 2-core VM here is 'vm'."""
        return f"{self.hostname}#{_boot_id()[:8]}"


@functools.lru_cache(maxsize=1)
def detect() -> HostInfo:
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cpu_model = _cpu_model()
    base = dict(
        cpu_model=cpu_model, cpu_cores=cores, torch=torch.__version__.split("+")[0], hostname=socket.gethostname()
    )
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.distributed.is_nccl_available() else "none"
        return HostInfo(
            device="cuda",
            device_name=torch.cuda.get_device_name(0),
            devices_per_node=torch.cuda.device_count(),
            cuda=str(torch.version.cuda),
            nccl=nccl,
            **base,
        )
    return HostInfo(device="cpu", device_name=cpu_model, devices_per_node=cores, cuda="none", nccl="none", **base)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "") or "noboot"
    except OSError:
        return "noboot"


def _slug(text: str) -> str:
    text = re.sub(r"\(R\)|\(TM\)|CPU|Processor|@.*$", "", text)
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.") or "unknown"


def commit(where: Path | None = None) -> str:
    """The commit of the repository under test (``where``, default the directory the session runs in: a team's
    repository, or the base worktree of an A/B gate), with -dirty for uncommitted changes; "unknown" outside git."""
    return _commit(str(where or os.getcwd()))


@functools.lru_cache(maxsize=8)
def _commit(where: str) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            cwd=where,
            timeout=10,
        )
        sha = out.stdout.strip()
        if not sha:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            cwd=where,
            timeout=10,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
