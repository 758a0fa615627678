"""The files ``scalegate init`` writes besides the marker and the CI files (init_ci.py): the pytest configuration; the
requirement the CI files install this scalegate by; and the writing itself, which overwrites nothing without
``--force``.
"""

from __future__ import annotations

import configparser
import importlib.metadata
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import tomllib

from scalegate.contract.errors import ScalegateError

PYTEST_INI = """\
[pytest]
# Written by `python -m scalegate init`: pytest (and the gate's sessions) run the scaling cases in scaling_tests/
testpaths = scaling_tests
addopts = -ra
"""


@dataclass(frozen=True, kw_only=True)
class Output:
    path: str  # relative to the repository's root
    text: str
    says: str  # what it is, in init's summary


def installed_requirement() -> tuple[str, str]:
    """The requirement that installs the scalegate running now (PEP 610's direct_url.json says where it came from),
    and a warning where a CI runner cannot reach that place."""
    dist = importlib.metadata.distribution("scalegate")
    recorded = dist.read_text("direct_url.json")
    if not recorded:
        return f"scalegate=={dist.version}", ""
    source = json.loads(recorded)
    url, vcs = source.get("url", ""), source.get("vcs_info")
    if vcs:
        return f"scalegate @ {vcs['vcs']}+{url}@{vcs['commit_id']}", ""
    far = "" if not url.startswith("file:") else f"scalegate was installed from {url} on this machine"
    if "dir_info" in source:  # a checkout (pip install -e): its commit, from where it lies
        path = url.removeprefix("file://")
        head = subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True)
        if head.returncode == 0:  # pip's requirement parser takes git+file://localhost/..., not git+file:///...
            return f"scalegate @ git+file://localhost{path}@{head.stdout.strip()}", far
    return f"scalegate @ {url}", far


def pytest_config(root: Path) -> tuple[Output | None, str]:
    """pytest.ini, unless the repository configures pytest elsewhere (a pytest.ini would shadow that file): then a
    note saying what to add there."""
    elsewhere = _pytest_config_elsewhere(root)
    if elsewhere:
        return None, f"{elsewhere} configures pytest here: add scaling_tests to its testpaths"
    return Output(path="pytest.ini", text=PYTEST_INI, says="pytest runs scaling_tests/"), ""


def _pytest_config_elsewhere(root: Path) -> str:
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            if "ini_options" in tomllib.loads(pyproject.read_text()).get("tool", {}).get("pytest", {}):
                return "pyproject.toml's [tool.pytest.ini_options]"
        except tomllib.TOMLDecodeError:
            pass
    for name, section in (("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        parser = configparser.ConfigParser()
        try:
            parser.read(root / name)
        except configparser.Error:
            continue
        if parser.has_section(section):
            return f"{name}'s [{section}]"
    return ""


def refuse_existing(root: Path, paths: list[str], force: bool) -> None:
    """Nothing is overwritten without ``--force``: every file in the way, named at once."""
    there = [p for p in paths if (root / p).exists()]
    if there and not force:
        raise ScalegateError(
            f"init would overwrite {', '.join(there)} in {root}",
            "move them away (or keep them and leave those out: --ci), or pass --force to overwrite them",
        )


def write(root: Path, outputs: list[Output]) -> None:
    for output in outputs:
        path = root / output.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(output.text)
        if path.suffix in (".sbatch", ".sh"):
            path.chmod(0o755)
