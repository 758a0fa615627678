"""Helpers shared by the harness's own tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scalegate.launch import warm

ROOT = Path(__file__).resolve().parents[1]


def run_suite(tmp_path: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the real scaling suite in a subprocess, as a user would, with its own results dir."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "scaling_tests"),
        "-p",
        "no:cacheprovider",
        "--scaling-results-dir",
        str(tmp_path / "results"),
        "-q",
        *args,
    ]
    env = dict(os.environ)
    env.pop("SCALEGATE_RUN_ID", None)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture
def suite(tmp_path):
    def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return run_suite(tmp_path, *args, timeout=timeout)

    return run


@pytest.fixture(scope="session")
def agents(tmp_path_factory):
    """The session's warm agent, as the suite launches through it by default (harness/plugin.py): tests that
    call ``run_case(spec, case_dir, agents=agents)`` share one server (~2 s a launch instead of a cold
    torchrun's ~5 s). It restarts when a case needs other preloaded modules (DeepSpeed, Lightning,
    transformers) and is closed at the end of the session. Tests of the cold torchrun itself launch without it."""
    pool = warm.pool(log_dir=tmp_path_factory.mktemp("agents"))
    yield pool
    pool.close()


@pytest.fixture
def without_agents(agents):
    """For a test that counts what this process left behind (namespaces named by its pid, worker processes under
    it): the session's warm agent, if one runs, is closed first, with its namespace and its whole tree. It is
    not a leftover, but it would be counted as one; the next warm launch starts it again."""
    agents.close()
