"""examples/your_model works as a user's own repository: copied outside this checkout, run with ``python -m
pytest`` there, the plugin found through its pytest11 entry point (the example names no plugin), its workload
through the conftest hook, its matrix through ``@pytest.mark.scaling_matrix``.

One real session (warm launcher, few steps): ddp, fsdp, deepspeed-zero2 and pipeline-gpipe on 1x2 with their
gradients checked against a single process, the results table, and ``--scaling-update-baselines`` writing
the workload's baseline. The session's cwd is not the project's directory, so the ranks import the workload
from the directories in their spec, not by luck of their cwd.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scalegate.checks import tolerances
from scalegate.contract import cards
from scalegate.contract.topology import Topology
from scalegate.plan import availability, hostinfo

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "your_model"
STRATEGIES = ("ddp", "fsdp", "deepspeed-zero2", "pipeline-gpipe")
FEW_STEPS = ("--scaling-steps", "5", "--scaling-warmup", "1", "--scaling-local-steps", "5")


@pytest.mark.nightly  # a whole user path of a minute or more: the nightly tier (docs/testing.md)
def test_the_example_runs_outside_the_repository(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__", "results", "baselines"))
    assert "scalegate.plugin" not in (project / "conftest.py").read_text()  # only the entry point can load it
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SCALEGATE_RUN_ID", "PYTEST_ADDOPTS")}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(project),
        "-p",
        "no:cacheprovider",
        "-q",
        *FEW_STEPS,
        "--scaling-update-baselines",
        "--scaling-baseline-dir",
        str(tmp_path / "baselines"),
        "--scaling-results-dir",
        str(tmp_path / "results"),
    ]
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]

    skipped = {
        s for s in STRATEGIES if availability.strategy_unavailable(cards.card(s), Topology.parse("1x2"), "cpu", 2)
    }
    ran = [s for s in STRATEGIES if s not in skipped]
    assert "ddp" in ran and "fsdp" in ran and "pipeline-gpipe" in ran
    assert "scaling results" in out
    for strategy in ran:  # a row of the table per case, ids strategy-model-topology
        assert f"\n{strategy}-my_mlp-1x2 " in out, out[-4000:]

    bound = tolerances.for_dtype("fp32").grad_rel
    for strategy in ran:
        case = json.loads((tmp_path / "results" / "latest" / f"{strategy}-my_mlp-1x2.json").read_text())
        assert case["status"] in ("ok", "no-baseline"), case["message"]
        assert case["spec"]["workload"] == "my_model:MyMLP" and case["spec"]["import_paths"] == [str(project)]
        assert case["result"]["launch"]["launcher"] == "warm"
        for rank in case["result"]["ranks"]:  # gradient agreement with one process, on every rank
            grads = rank["grad_check"]["grads"]
            assert grads["errors"][grads["worst"]]["rel"] <= bound

    written = json.loads((tmp_path / "baselines" / f"{hostinfo.detect().profile}.json").read_text())
    assert {f"{s}-my_mlp-1x2:tiny" for s in ran} <= set(written["cases"])
