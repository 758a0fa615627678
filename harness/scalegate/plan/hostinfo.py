"""What this machine is: the hardware fingerprint that names a baseline profile, its cluster, and provenance.

A profile reads ``HARDWARE-SOFTWARE[@CLUSTER]``: ``cuda-nvidia-h100-80gb-hbm3-x8-torch2.13.0-cuda12.8-nccl2.27.3@alps``,
``cpu-amd-epyc-2c-torch2.13.0`` (no cluster named). The cluster keeps two clusters' baselines and history series
apart even where their hardware and software are the same. It is ``SCALEGATE_CLUSTER`` where that is set (set and
empty: no cluster), else SLURM's ClusterName as SLURM exports it to every job (``SLURM_CLUSTER_NAME``); read from
the environment, not from ``scontrol show config``, which needs the controller and would cost every session
outside SLURM a call that can hang. A profile without one says so (``cluster_note``).
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import re
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping


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
    cluster: str = ""  # SCALEGATE_CLUSTER, else SLURM's ClusterName; "" where none is named

    @property
    def hardware(self) -> str:
        """Device model and count per node: what a history series keeps apart (with the cluster)."""
        name = _slug(self.device_name)
        return f"cuda-{name}-x{self.devices_per_node}" if self.device == "cuda" else f"cpu-{name}-{self.cpu_cores}c"

    @property
    def profile(self) -> str:
        """Baseline profile name: the hardware, the software that times it, and the cluster where one is named."""
        software = f"-torch{self.torch}" + (f"-cuda{self.cuda}-nccl{self.nccl}" if self.device == "cuda" else "")
        return self.hardware + software + (f"@{self.cluster}" if self.cluster else "")

    @property
    def cluster_note(self) -> str:
        return cluster_note(self.cluster)

    def fingerprint(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "hostname"}

    @property
    def host_id(self) -> str:
        """This machine since its last boot: the stored gate widens its band for a baseline recorded on any
        other (docs/gate.md). The hostname alone does not tell machines apart: every 2-core VM here is 'vm'."""
        return f"{self.hostname}#{_boot_id()[:8]}"


CLUSTER_ENV = "SCALEGATE_CLUSTER"
# The packages whose versions a run records besides torch, CUDA and NCCL (distribution names): the history draws a
# change of any of them on its series as an event (docs/history.md).
PACKAGES = ("deepspeed", "lightning", "transformers", "accelerate")
PROFILE = re.compile(
    r"^(?P<hardware>.+?)-torch(?P<torch>[^-@]+)(?:-cuda(?P<cuda>[^-@]+)-nccl(?P<nccl>[^-@]+))?(?:@(?P<cluster>.+))?$"
)


def cluster_name(environ: Mapping[str, str] | None = None) -> str:
    """``SCALEGATE_CLUSTER`` where set (empty: none), else ``SLURM_CLUSTER_NAME``, as a slug; "" for none."""
    env = os.environ if environ is None else environ
    name = env[CLUSTER_ENV] if CLUSTER_ENV in env else env.get("SLURM_CLUSTER_NAME", "")
    return re.sub(r"[^a-z0-9._-]+", "-", name.strip().lower()).strip("-.")


def cluster_note(cluster: str) -> str:
    """A profile's cluster, or that it has none and how to name one."""
    return f"cluster {cluster}" if cluster else f"no cluster named (set {CLUSTER_ENV}, or run inside a SLURM job)"


@dataclass(frozen=True, kw_only=True)
class ProfileParts:
    hardware: str
    cluster: str
    versions: dict[str, str]  # torch, and on CUDA cuda and nccl


def parse_profile(profile: str) -> ProfileParts:
    """A profile name back into its parts; a name of another form is all hardware, with no versions."""
    found = PROFILE.match(profile)
    if found is None:
        hardware, _, cluster = profile.partition("@")
        return ProfileParts(hardware=hardware, cluster=cluster, versions={})
    versions = {k: found[k] for k in ("torch", "cuda", "nccl") if found[k]}
    return ProfileParts(hardware=found["hardware"], cluster=found["cluster"] or "", versions=versions)


@functools.lru_cache(maxsize=4)
def versions(host: HostInfo) -> dict[str, str]:
    """The software a run was timed with: torch (with CUDA and NCCL on a GPU) and the ``PACKAGES`` installed."""
    found = {"torch": host.torch} | ({"cuda": host.cuda, "nccl": host.nccl} if host.device == "cuda" else {})
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


@functools.lru_cache(maxsize=1)
def detect() -> HostInfo:
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cpu_model = _cpu_model()
    base = dict(
        cpu_model=cpu_model,
        cpu_cores=cores,
        torch=torch.__version__.split("+")[0],
        hostname=socket.gethostname(),
        cluster=cluster_name(),
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
