"""A workload of your own is judged on whether it learns, not on how fast.

Two ordinary models with data of their own (tests/assets/own_pace_models.py: a Conv-BatchNorm CNN, a
MultiheadAttention model returning a dict), registered from a project outside this checkout through its conftest
hook, their presets at the default ``convergence_fraction``. Before, every case failed ``loss did not converge:
2.165 after 21 steps is above 70% of its start 2.29`` though it agreed with one process; now they pass, and the
fault, the same CNN on data it cannot learn (a flat loss with batch-to-batch noise), fails naming the knob.
Real sessions with the default steps (a curve of 21 losses, as the issue measured).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ASSET = ROOT / "tests" / "assets" / "own_pace_models.py"

CONFTEST = """
from own_pace_models import BlindCNN, OwnAttention, OwnCNN


def pytest_scaling_workloads():
    return [OwnCNN, OwnAttention, BlindCNN]
"""

TESTS = """
import pytest


@pytest.mark.scaling_matrix(models={models}, strategies={strategies}, topologies=["1x2"])
def test_own(scaling_case, benchmark):
    scaling_case.check(benchmark)


@pytest.mark.scaling_matrix(models=["blind_cnn"], strategies=["ddp"], topologies=["1x2"])
def test_blind(scaling_case):
    scaling_case.check()
"""


def _session(tmp_path: Path, models: list[str], strategies: list[str]) -> tuple[str, dict[str, dict]]:
    project = tmp_path / "team"
    (project / "scaling_tests").mkdir(parents=True)
    shutil.copy(ASSET, project / ASSET.name)
    (project / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (project / "pytest.ini").write_text("[pytest]\ntestpaths = scaling_tests\n")
    (project / "scaling_tests" / "test_own.py").write_text(
        textwrap.dedent(TESTS).format(models=models, strategies=strategies)
    )
    env = {k: v for k, v in os.environ.items() if k not in ("SCALEGATE_RUN_ID", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(ROOT / "harness")  # this checkout's checks, in the team's session
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    run = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=900)
    [results] = [p for p in (project / "results").iterdir() if p.is_dir() and p.name != "latest"]
    return run.stdout + run.stderr, {p.stem: json.loads(p.read_text()) for p in results.glob("*-1x2.json")}


def _check(out: str, cases: dict[str, dict], models: list[str], strategies: list[str]) -> None:
    for model in models:
        for strategy in strategies:
            case = cases[f"{strategy}-{model}-1x2"]
            assert case["status"] == "no-baseline", case["message"]  # agreement, loss curve, convergence: passed
            assert len(case["result"]["losses"]) == 20  # judged over the start and 20 steps, not skipped
    blind = cases["ddp-blind_cnn-1x2"]
    assert blind["status"] == "failed"
    assert "loss did not fall [ddp-blind_cnn-1x2]: a trend of" in blind["message"]
    assert "standard errors below flat, where a fall of 2 standard errors is needed" in blind["message"]
    assert "Preset(convergence_fraction=None), the default" in blind["message"]
    assert f"1 failed, {len(models) * len(strategies)} passed" in out.splitlines()[-1], out[-3000:]


@pytest.mark.slow
def test_a_cnn_learning_at_its_own_pace_passes_and_one_that_cannot_learn_fails(tmp_path):
    out, cases = _session(tmp_path, ["own_cnn"], ["ddp"])
    _check(out, cases, ["own_cnn"], ["ddp"])


@pytest.mark.slow
@pytest.mark.nightly  # the issue's two models on its three strategies, 96 s here; the default tier runs the CNN on ddp
def test_the_issues_models_pass_on_ddp_fsdp_and_zero2(tmp_path):
    models, strategies = ["own_cnn", "own_attention"], ["ddp", "fsdp", "deepspeed-zero2"]
    out, cases = _session(tmp_path, models, strategies)
    _check(out, cases, models, strategies)
