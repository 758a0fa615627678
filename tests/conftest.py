"""Helpers shared by the harness's own tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
