"""The gate's sides: what each commit's pytest session runs, in which tree and interpreter, and whether they can pair.

A side is one commit's sessions, one per round: the working tree (head) or the PR's base commit checked out beside
it (gate/worktree.py), each importing its own scalegate where the repository is scalegate itself, else the
environment's installed one (``--base-python`` names the base side's). The sessions measure; the gate judges.

Every session's command is built in one place, ``pytest_argv``: the repository's tests and default selection, the
gate's settings, the results directory, the user's arguments (argparse: the last one wins), then what the gate sets
for the session whatever the user said (a round's session launches each case once).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from scalegate.contract import checkout, duet
from scalegate.gate import sessions
from scalegate.gate.project import Project


class RoundSide(Protocol):
    """What a round needs of a side (gate/rounds.py, gate/paired.py): its name, its tree, its sessions' environment
    and its session's command for the round."""

    @property
    def name(self) -> str: ...

    @property
    def tree(self) -> Path: ...

    def command(self, args: Sequence[str], where: Path, paired: Sequence[str] = ()) -> list[str]: ...

    def environment(self) -> dict[str, str]: ...


@dataclass(frozen=True, kw_only=True)
class Side:
    """One commit's sessions: they run in its checkout (its harness, workloads and tests), one per round."""

    name: str  # "head" (the working tree) or "base" (the PR's base commit)
    tree: Path
    project: Project  # the repository the gate runs in: its tests and default selection
    python: str = sys.executable  # the side's interpreter
    settings: tuple[str, ...] = ()  # the gate's settings, before the user's arguments (GatePlan.settings)
    baselines: Path | None = None  # the baseline directory its sessions judge against (A/B: an empty one)
    drop: tuple[str, ...] = ()  # environment variables its sessions must not inherit (another venv's side)

    def command(self, args: Sequence[str], where: Path, paired: Sequence[str] = ()) -> list[str]:
        """This side's session of one round, writing under ``where``: one launch of each case it selects. ``args``:
        the user's arguments and the round's selection; ``paired``: the options that pair it (gate/paired.py).

        In an A/B gate a stored baseline in a session would judge its launches against another machine's level (and
        relaunch on its own): each session gets the empty ``baselines`` directory. Both directories lie in the head's
        repository (the gate's run directory), and pytest finds its configuration file from the common ancestor of
        the command line's arguments that are existing paths, an option's separate value included: given as ``--opt
        PATH`` the base session would read the head's pytest.ini, and so run the head's test files and script while
        importing the base's scalegate. ``--opt=PATH`` is one token, an option, which pytest does not take for a
        path: each side's session finds its own tree's configuration from its working directory."""
        forced = [*paired, "--scaling-max-launches", "1"]
        if self.baselines is not None:
            forced.append(f"--scaling-baseline-dir={self.baselines}")
        return pytest_argv(
            self.project,
            python=self.python,
            tests=self.project.tests,
            settings=self.settings,
            results_dir=where,
            user_args=args,
            forced=[*forced, *older_plugin(self.tree)],
        )

    def environment(self) -> dict[str, str]:
        """The session's environment: each commit imports its own scalegate (contract/checkout.py)."""
        return sessions.environment(self.tree, self.drop)


def pytest_argv(
    project: Project,
    *,
    python: str,
    tests: Sequence[str],
    settings: Sequence[str],
    results_dir: Path,
    user_args: Sequence[str],
    forced: Sequence[str] = (),
) -> list[str]:
    """A session's command in ``project`` (``python``: the side's interpreter): its ``tests``, its default selection
    and the gate's ``settings`` first, the user's arguments after them (argparse: the last one wins), then what the
    gate sets whatever the user said (``forced``). The results directory is one token (``--opt=PATH``: see
    ``Side.command``)."""
    return [
        python,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        *tests,
        *project.selection(list(user_args)),
        *settings,
        f"--scaling-results-dir={results_dir}",
        *user_args,
        *forced,
    ]


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
