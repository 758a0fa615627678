"""The gate's sides: what each commit's pytest session runs, in which tree and interpreter, and whether they can pair.

A side is one commit's sessions, one per round: the working tree (head) or the PR's base commit checked out beside
it (gate/worktree.py), each importing its own scalegate where the repository is scalegate itself, else the
environment's installed one (``--base-python`` names the base side's). The sessions measure; the gate judges.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from scalegate.contract import checkout, duet
from scalegate.gate.project import Project


@dataclass(frozen=True, kw_only=True)
class Side:
    """One commit's sessions: they run in its checkout (its harness, workloads and tests), one per round."""

    name: str  # "head" (the working tree) or "base" (the PR's base commit)
    tree: Path
    argv: Callable[[list[str], Path], list[str]]  # (pytest arguments, the round's results dir) -> the command
    drop: tuple[str, ...] = ()  # environment variables its sessions must not inherit (another venv's side)

    def command(self, args: list[str], where: Path) -> list[str]:
        """This side's session of one round: one launch of each case it selects."""
        return [*self.argv([*args, "--scaling-max-launches", "1"], where), *older_plugin(self.tree)]

    def environment(self) -> dict[str, str]:
        """The session's environment: each commit imports its own scalegate (contract/checkout.py)."""
        return checkout.environment({k: v for k, v in os.environ.items() if k not in self.drop}, self.tree)


def pytest_argv(
    project: Project, user_args: list[str], results_dir: Path, tests: list[str], settings: list[str], python: str
) -> list[str]:
    """A session's command in ``project``: its default selection and the gate's settings first, the user's arguments
    last (argparse: the last one wins); ``python``: the side's interpreter."""
    return [
        python,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        *tests,
        *project.selection(user_args),
        *settings,
        f"--scaling-results-dir={results_dir}",  # one token: see session_command
        *user_args,
    ]


def session_command(
    project: Project, python: str, settings: list[str], empty: Path | None
) -> Callable[[list[str], Path], list[str]]:
    """One side's session command (``python``: the side's interpreter). In an A/B gate a stored baseline in a
    session would judge its launches against another machine's level (and relaunch on its own): each session gets
    the ``empty`` baseline directory.

    Both directories lie in the head's repository (the gate's run directory), and pytest finds its configuration
    file from the common ancestor of the command line's arguments that are existing paths, an option's separate
    value included: given as ``--opt PATH`` the base session would read the head's pytest.ini, and so run the head's
    test files and script while importing the base's scalegate. ``--opt=PATH`` is one token, an option, which
    pytest does not take for a path: each side's session finds its own tree's configuration from its working
    directory."""

    def command(extra: list[str], where: Path) -> list[str]:
        argv = pytest_argv(project, [*settings, *extra], where, project.tests, [], python)
        return [*argv, f"--scaling-baseline-dir={empty}"] if empty is not None else argv

    return command


def older_plugin(tree: Path) -> list[str]:
    """A commit from before scalegate was one import name registers its plugin as ``harness.plugin`` from its
    conftest.py; the installed ``scalegate.plugin`` must then stay out of its session (the two would declare the
    same options)."""
    conftest = tree / "conftest.py"
    return ["-p", "no:scalegate.plugin"] if conftest.is_file() and "harness.plugin" in conftest.read_text() else []


def unpaired_base(base_tree: Path, base_python: str) -> str:
    """Why the base side's ranks cannot pair with the head's (docs/duet.md), or "". The base side runs the base
    commit's own harness where the base is scalegate itself, else the base environment's installed one; both must
    speak this protocol's version."""
    if checkout.path_entry(base_tree) is not None:
        if not (base_tree / duet.CLIENT_FILE).is_file():
            return f"the base commit has no duet client ({duet.CLIENT_FILE}): an older base"
        protocol = base_tree / duet.PROTOCOL_FILE
        if duet.VERSION_LINE not in (protocol.read_text() if protocol.is_file() else ""):
            return f"the base commit's duet client is not version {duet.VERSION} ({duet.PROTOCOL_FILE}): an older base"
        return ""
    if base_python != sys.executable:
        probe = subprocess.run(
            [base_python, "-c", "from scalegate.contract import duet; print(duet.VERSION)"],
            capture_output=True,
            text=True,
        )
        if probe.returncode != 0 or probe.stdout.strip() != str(duet.VERSION):
            return f"the base environment's scalegate ({base_python}) has no duet client of version {duet.VERSION}"
    return ""
