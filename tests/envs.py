"""A team's environment that already has its torch: a fresh venv (``--without-pip``) whose site-packages hold one
``.pth`` line, a folder of links to this suite's installed packages (torch, pytest, transformers, pip, setuptools,
...), all but scalegate. pip runs offline (``PIP_NO_INDEX``) and builds with the packages it sees
(``PIP_NO_BUILD_ISOLATION=0``), so torch can be neither upgraded in place nor downloaded: an install that wanted
another torch fails, or puts a second one into the venv's own site-packages, first on the path.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

TORCH_PROBE = "import torch; print(torch.__file__, torch.__version__)"


@dataclass(frozen=True)
class FreshEnv:
    python: Path
    site: Path  # its own site-packages
    env: dict[str, str]  # the environment a command runs in: its bin/ first on PATH, pip offline

    def run(self, command: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", command], cwd=cwd, env=self.env, capture_output=True, text=True, timeout=timeout
        )


def beside_torch(where: Path) -> FreshEnv:
    """A fresh venv under ``where`` that sees this suite's packages but scalegate."""
    linked = where / "packages"
    linked.mkdir(parents=True)
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(("scalegate", "__editable__")) and entry.suffix != ".pth":
            (linked / entry.name).symlink_to(entry)
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    [site] = venv.glob("lib/python*/site-packages")
    (site / "team-packages.pth").write_text(f"{linked}\n")
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "PYTHONHOME")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("SCALEGATE_")}
    env |= {"PATH": f"{venv / 'bin'}:{env['PATH']}", "PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0"}
    return FreshEnv(python=venv / "bin" / "python", site=site, env=env)
