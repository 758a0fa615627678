"""The ranks find a user's workload from the spec alone, whatever their cwd and environment.

Ranks are other processes (torchrun, srun, the warm agent's forkserver, maybe another node), so the spec
carries the reference and the absolute directories to import it from (``CaseSpec.workload``,
``CaseSpec.import_paths``) and ``scalegate.workloads.resolve`` is the one resolver both sides use. Real processes:
a fresh interpreter elsewhere, and a cold torchrun job of the example's workload (the warm launcher runs
it in tests/test_example.py). ``hf:`` references go to ``fixtures/hf.py``: here only the dispatch to it is
checked, with a stand-in module; tests/test_hf.py tests the real one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from scalegate import workloads
from scalegate.checks import agreement
from scalegate.contract.errors import SpecError
from scalegate.contract.spec import CaseSpec
from scalegate.launch import run_case
from scalegate.workloads import loader

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "your_model"


def spec(project: Path | None, **changes) -> CaseSpec:
    fields = dict(
        strategy="ddp",
        model="my_mlp",
        preset="tiny",
        topology="1x2",
        micro_batch=32,
        steps=2,
        warmup=1,
        workload="my_model:MyMLP",
        import_paths=(str(project),) if project else (),
    )
    fields.update(changes)
    return CaseSpec.of(**fields)


def resolve_elsewhere(the_spec: CaseSpec, cwd: Path) -> subprocess.CompletedProcess:
    """``scalegate.workloads.resolve`` in a fresh interpreter, in another directory, with only scalegate on its path."""
    code = (
        "import json, sys\nimport scalegate.workloads\nfrom scalegate.contract.spec import CaseSpec\nfrom scalegate.contract.errors import SpecError\n"
        "try:\n    print(scalegate.workloads.resolve(CaseSpec.from_dict(json.loads(sys.argv[1]))).__qualname__)\n"
        "except SpecError as exc:\n    print(exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", code, json.dumps(the_spec.to_dict())],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_fresh_process_elsewhere_imports_the_workload_from_the_specs_paths(tmp_path):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    shutil.copytree(EXAMPLE, project)
    elsewhere.mkdir()
    found = resolve_elsewhere(spec(project), elsewhere)
    assert found.stdout.strip() == "MyMLP", found.stderr
    without = resolve_elsewhere(spec(None), elsewhere)  # the spec is all a rank has: no paths, no import
    assert "cannot import module 'my_model'" in without.stdout and "HINT:" in without.stdout, without.stderr


def test_the_spec_refuses_relative_import_paths_and_round_trips_them():
    with pytest.raises(SpecError, match="is relative"):
        spec(Path("project"))
    written = spec(Path("/abs/project"))
    assert CaseSpec.from_dict(json.loads(json.dumps(written.to_dict()))) == written  # a JSON list back to a tuple


def test_a_renamed_class_is_caught_before_a_rank_trains_the_wrong_model(tmp_path):
    shutil.copytree(EXAMPLE, tmp_path / "project")
    with pytest.raises(SpecError, match="is named 'my_mlp', the spec says 'old_name'"):
        workloads.resolve(spec(tmp_path / "project", model="old_name"))


def test_strategies_get_the_workers_own_workload_object(tmp_path):
    import torch

    from scalegate import strategies
    from scalegate.strategies.base import RankContext

    shutil.copytree(EXAMPLE, tmp_path / "project")
    the_spec = spec(tmp_path / "project", strategy="fsdp", dims={"depth": 2})
    ctx = RankContext(rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0, device=torch.device("cpu"))
    own = workloads.resolve(the_spec)("tiny", 1, "/data", dims=the_spec.dims)
    assert strategies.get("fsdp")(ctx, the_spec, workload=own).workload is own  # its data dir and dims with it
    built = strategies.get("fsdp")(ctx, the_spec).workload  # a strategy built alone (tests) resolves the spec's
    assert type(built).__name__ == "MyMLP" and built.preset.dims["depth"] == 2


@pytest.mark.slow
def test_a_cold_torchrun_job_trains_the_users_workload_with_agreeing_gradients(tmp_path):
    shutil.copytree(EXAMPLE, tmp_path / "project")
    assert Path.cwd() != tmp_path / "project"  # found through the spec's paths, not the ranks' cwd
    result = run_case(spec(tmp_path / "project", strategy="fsdp", dims={"depth": 3}), tmp_path / "case")
    assert result.launch["launcher"] == "torchrun"
    assert agreement.agreement(result) is None and result.ranks[0].grad_check["grads"]["worst"]
    assert result.ranks[0].shards == ["params", "grads", "optimizer"]  # what the launching side judges, reported


def test_hf_references_need_fixtures_hf(monkeypatch):
    real = loader.importlib.util.find_spec
    monkeypatch.setattr(
        loader.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "scalegate.workloads.hf" else real(name, *a),
    )
    with pytest.raises(SpecError, match="'hf:gpt2' needs fixtures/hf.py") as err:
        workloads.load("hf:gpt2", where="--scaling-models hf:gpt2")
    assert err.value.hint


def test_hf_references_call_hf_workload_lazily_once_per_model_type(monkeypatch):
    cnn = workloads.get("cnn")
    calls: list[str] = []

    class Gpt2(cnn):
        name = "hf_gpt2"

    def hf_workload(model_type: str):
        calls.append(model_type)
        return Gpt2

    # a stand-in with fixtures/hf.py's one function shows the resolver's dispatch on its own
    stand_in = types.ModuleType("scalegate.workloads.hf")
    stand_in.hf_workload = hf_workload
    monkeypatch.setitem(sys.modules, "scalegate.workloads.hf", stand_in)
    monkeypatch.setattr(
        workloads, "hf", stand_in, raising=False
    )  # `from scalegate.workloads import hf` reads it once imported
    monkeypatch.setattr(loader.importlib.util, "find_spec", lambda name, *a: object())
    loader._hf_class.cache_clear()
    try:
        assert workloads.load("hf:gpt2") is Gpt2 and workloads.load("hf:gpt2") is Gpt2
        hf_spec = CaseSpec.of(
            strategy="ddp", model="hf_gpt2", preset="tiny", topology="1x2", micro_batch=32, workload="hf:gpt2"
        )
        assert workloads.resolve(hf_spec) is Gpt2
        assert calls == ["gpt2"]
    finally:
        loader._hf_class.cache_clear()
