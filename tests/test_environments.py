"""``gate --base-python``: the A/B gate across two Python environments (gate/environments.py).

Fast: each bad interpreter is refused naming the side, with a HINT and no traceback, before anything launches;
the table's lines for two environments. Default tier: the whole command with the same interpreter on both sides
(A/A across "environments") on ``deepspeed-zero2-cnn-1x2``. Nightly: a second venv holding another DeepSpeed
release (built once under ``.venv/envs`` and reused) against the head's, both versions in the JSON and the table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scalegate.contract.errors import ScalegateError
from scalegate.gate import environments
from scalegate.report import environments as env_report

ROOT = Path(__file__).resolve().parents[1]
OTHER_DEEPSPEED = "0.18.4"  # DeepSpeed #7885 reports ZeRO-2 slower from 0.18.4 to 0.18.5
CASE = [
    "-k",
    "deepspeed-zero2-cnn-1x2 or single-cnn-1x1",
    "--scaling-strategies",
    "single,deepspeed-zero2",
    "--scaling-steps",
    "5",
    "--scaling-warmup",
    "2",
]


def _gate(tmp_path: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SCALEGATE_RUN_ID", "PYTEST_ADDOPTS")}
    cmd = [sys.executable, "-m", "scalegate", "gate", "--results-dir", str(tmp_path / "gate")]
    cmd += ["--json", str(tmp_path / "gate.json"), "--markdown", str(tmp_path / "gate.md"), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A Python with nothing installed: no torch, no pytest."""
    where = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    return str(where / "bin" / "python")


def test_this_environment_is_probed_with_its_versions():
    found = environments.head()
    assert found["python"] == sys.executable
    assert found["packages"]["torch"] and found["packages"]["pytest-benchmark"] and "deepspeed" in found["packages"]


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda tmp, bare: str(tmp / "no-such-python"), "no such file (base side)"),
        (lambda tmp, bare: str(tmp), "is not an executable file (base side)"),
        (lambda tmp, bare: "/bin/true", "is not a Python 3 interpreter (base side)"),
        (lambda tmp, bare: bare, "has no torch, pytest, pytest-benchmark, numpy"),
    ],
    ids=["missing", "a-directory", "not-python", "no-torch"],
)
def test_a_bad_base_interpreter_is_refused_naming_the_side(tmp_path, bare_python, make, says):
    with pytest.raises(ScalegateError) as caught:
        environments.probe(make(tmp_path, bare_python), "base")
    assert says in caught.value.message and "--base-python" in caught.value.hint


def test_a_torch_for_another_device_is_refused():
    head = {"python": "/h/python", "packages": {"torch": "2.13.0+cpu"}, "cuda": None}
    base = {"python": "/b/python", "packages": {"torch": "2.13.0+cu128"}, "cuda": "12.8"}
    with pytest.raises(ScalegateError) as caught:
        environments.check_same_device(base, head)
    assert "built for another device than the head's" in caught.value.message and "CUDA 12.8" in caught.value.message
    environments.check_same_device(head, head)


def test_the_gate_refuses_a_bad_base_python_before_launching(tmp_path, bare_python):
    run = _gate(tmp_path, "--base-python", bare_python, *CASE, timeout=300)
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert "the base side's environment" in run.stderr and "HINT:" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "gate").exists() or not list((tmp_path / "gate").glob("gate-*/round-*"))


def test_the_table_shows_only_the_versions_that_differ():
    head = {"python": "/h/python", "python_version": "3.11.7", "packages": {"torch": "2.13.0", "deepspeed": "0.19.8"}}
    base = {**head, "python": "/b/python", "packages": {"torch": "2.13.0", "deepspeed": "0.18.4"}}
    text = env_report.markdown(base, head)
    assert "base `/b/python`, head `/h/python`" in text and "| deepspeed | 0.18.4 | 0.19.8 |" in text
    assert "torch" not in text
    assert "the same versions on both sides" in env_report.markdown(head, {**head, "scalegate": "abc"})


@pytest.mark.slow
@pytest.mark.nightly  # nightly: a whole A/A gate across two venvs; bad interpreters are refused in the fast tier
def test_a_and_a_across_environments_passes_and_records_both(tmp_path):
    run = _gate(tmp_path, "--base-python", sys.executable, *CASE, "--scaling-max-launches", "1")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    data = json.loads((tmp_path / "gate.json").read_text())
    assert data["environments"]["base"]["python"] == data["environments"]["head"]["python"] == sys.executable
    assert data["environments"]["base"]["scalegate"] == data["environments"]["head"]["scalegate"] != "unknown"
    assert "the same versions on both sides" in (tmp_path / "gate.md").read_text()
    assert "regressed" not in (tmp_path / "gate.md").read_text()


@pytest.mark.nightly
def test_another_deepspeed_release_on_the_base_side_is_measured_and_named(tmp_path):
    python = environments.overlay("deepspeed", OTHER_DEEPSPEED, ROOT / ".venv" / "envs")
    run = _gate(tmp_path, "--base-python", python, *CASE, "--scaling-max-launches", "2")
    assert run.returncode in (0, 1), run.stdout[-4000:] + run.stderr[-4000:]  # a verdict, whichever it is
    data = json.loads((tmp_path / "gate.json").read_text())
    assert data["environments"]["base"]["packages"]["deepspeed"] == OTHER_DEEPSPEED
    assert data["environments"]["head"]["packages"]["deepspeed"] != OTHER_DEEPSPEED
    assert f"| deepspeed | {OTHER_DEEPSPEED} |" in (tmp_path / "gate.md").read_text()
