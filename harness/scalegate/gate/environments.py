"""The Python environments an A/B gate compares: ``gate --base-python PATH`` runs the base side in another one.

A pull request that bumps torch, DeepSpeed, Lightning or transformers changes the installed packages, not the
code; with both sides in one environment the bump is measured on both and always passes. ``--base-python`` names
the base side's interpreter (another venv's ``bin/python``): the base side's pytest sessions, and every rank they
launch (the launchers start ranks with the session's own ``sys.executable``), run there. Each side's
environment is probed once, before any launch, by running its interpreter on ``PROBE`` (package metadata, and
torch for its CUDA and NCCL versions); what it records goes into the gate's JSON and, where the two sides differ,
under its table (``harness/scalegate/report/environments.py``).

The probe is also the bad-input check: a path that is not a Python, an environment without torch or without
the suite's own dependencies, a torch built for another device than the head's: each a ScalegateError naming
the side, with a HINT.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from scalegate.contract.errors import ScalegateError

# The packages each side's versions are recorded for (distribution names); torch's CUDA and NCCL come from torch.
PACKAGES = ("torch", "deepspeed", "lightning", "transformers", "pytest", "pytest-benchmark", "numpy")
NEEDED = ("torch", "pytest", "pytest-benchmark", "numpy")  # what a side's sessions cannot run without
SETUP_HINT = (
    "build the base environment from the base commit's own files, e.g. `git worktree add /tmp/base origin/main && "
    "(cd /tmp/base && ./setup.sh)` and pass --base-python /tmp/base/.venv/bin/python (docs/gate.md, "
    "'A dependency bump is a pull request too')"
)

PROBE = r"""
import importlib.metadata as md, json, platform, sys
out = {"python": sys.executable, "python_version": platform.python_version(), "packages": {}}
for name in sys.argv[1:]:
    try:
        out["packages"][name] = md.version(name)
    except md.PackageNotFoundError:
        out["packages"][name] = None
try:
    import torch
    out["cuda"] = torch.version.cuda
    out["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
except Exception as exc:  # a broken torch is the caller's error to name
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
print("SCALEGATE-ENV " + json.dumps(out))
"""


def probe(python: str, side: str, timeout_s: float = 120) -> dict[str, Any]:
    """What ``python`` has installed; bad input (naming ``side``) when it is no Python or lacks what the suite
    needs. The environment's own variables reach it, less a PYTHONPATH that would show it the head's packages."""
    path = Path(python)
    if not path.exists():
        raise ScalegateError(f"--base-python {python}: no such file ({side} side)", SETUP_HINT)
    if path.is_dir() or not os.access(path, os.X_OK):
        raise ScalegateError(f"--base-python {python} is not an executable file ({side} side)", SETUP_HINT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        done = subprocess.run(
            [str(path), "-c", PROBE, *PACKAGES], capture_output=True, text=True, timeout=timeout_s, env=env
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ScalegateError(f"--base-python {python} could not be run ({side} side): {exc}", SETUP_HINT) from None
    line = next((x for x in done.stdout.splitlines() if x.startswith("SCALEGATE-ENV ")), None)
    if done.returncode != 0 or line is None:
        said = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ScalegateError(f"--base-python {python} is not a Python 3 interpreter ({side} side): {said}", SETUP_HINT)
    found = json.loads(line.split(" ", 1)[1])
    missing = [name for name in NEEDED if not found["packages"].get(name)]
    if missing:
        raise ScalegateError(
            f"the {side} side's environment ({python}) has no {', '.join(missing)}: the suite cannot run there",
            SETUP_HINT,
        )
    if found.get("torch_error"):
        raise ScalegateError(
            f"torch does not import in the {side} side's environment: {found['torch_error']}", SETUP_HINT
        )
    return found


def head() -> dict[str, Any]:
    """The head side's environment: this interpreter, probed the same way."""
    return probe(sys.executable, "head")


def check_same_device(base: dict[str, Any], head_env: dict[str, Any]) -> None:
    """Both sides' torch must drive the same device: a CPU build against a CUDA one measures the hardware."""
    if bool(base.get("cuda")) == bool(head_env.get("cuda")):
        return

    def build(env: dict[str, Any]) -> str:
        return f"{env['packages'].get('torch')}, " + (f"CUDA {env['cuda']}" if env.get("cuda") else "CPU only")

    raise ScalegateError(
        f"the base side's torch ({build(base)}, {base['python']}) is built for another device than the head's "
        f"({build(head_env)})",
        "install the same kind of torch build on both sides (the CUDA wheel for the driver on a GPU machine, "
        "the CPU wheel on a CPU one)",
    )


def overlay(package: str, version: str, root: Path) -> str:
    """A venv at ``root/<package>-<version>`` that sees this environment's packages (a ``.pth`` line) with
    ``package==version`` installed over them without its dependencies (the head's torch stays), built once and
    reused; its interpreter's path. DeepSpeed's ops are not built (``DS_BUILD_OPS=0``): pure Python, as setup.sh
    installs it. What a dependency-bump A/B needs when the base side differs by one package."""
    where = root / f"{package}-{version}"
    python = where / "bin" / "python"
    built = where / ".scalegate-built"
    if built.exists() and python.exists():
        return str(python)
    shutil.rmtree(where, ignore_errors=True)
    try:
        _run([sys.executable, "-m", "venv", str(where)], f"creating a venv at {where}")
        site = next((where / "lib").glob("python*/site-packages"))
        (site / "zz_scalegate_head.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        _run([*pip, "setuptools>=70.1"], "installing setuptools (DeepSpeed's build backend)")
        env = {**os.environ, "DS_BUILD_OPS": "0"}
        _run(
            [*pip, "--no-deps", "--no-build-isolation", f"{package}=={version}"],
            f"installing {package}=={version}",
            env,
        )
    except ScalegateError:
        shutil.rmtree(where, ignore_errors=True)  # nothing half-built is left to be reused
        raise
    if package == "deepspeed":  # its CPU comm op, JIT-built into the venv's own cache as setup.sh does (~1 min)
        warm = "from deepspeed.comm.torch import build_shm_op; build_shm_op()"
        env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(where / "torch_extensions")}
        subprocess.run([str(python), "-c", warm], capture_output=True, env=env, timeout=1800)
    built.write_text(f"{package}=={version}\n")
    return str(python)


def _run(cmd: list[str], what: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        said = "\n".join(line for line in done.stderr.splitlines() if "is ignored" not in line)[-1500:]
        raise ScalegateError(
            f"{what} failed:\n{said}",
            "check the version exists (`pip index versions NAME`) and the registry is reachable",
        )
