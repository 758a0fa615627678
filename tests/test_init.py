"""``python -m scalegate init``'s parts (harness/scalegate/cli/init*.py): the script found and its flags read from the
zoo's real scripts, the marker planned and validated as pytest will read it, the loss pattern checked against a
short run's lines, the CI templates rendered; and its bad input, through the command: one error and its HINT, exit
2, nothing written. The whole path in a team's repository, with a real install, runs in tests/test_adopt.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scalegate.cli import init_ci, init_cluster, init_files, init_marker, init_probe, init_script
from scalegate.contract.errors import ScalegateError
from tests import ci_standins
from tests.conftest import ROOT
from tests.repos import git

ZOO = ROOT / "examples" / "zoo"
TRAIN = ROOT / "examples" / "train_script" / "train.py"


def _repo(tmp_path: Path, *scripts: Path) -> Path:
    repo = tmp_path / "team"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    for script in scripts:
        shutil.copy(script, repo / script.name)
    return repo


def _plan(repo: Path, script: str, **given) -> init_marker.Marker:
    found = init_script.read_flags(repo / script)
    options = dict(name=None, strategies=None, topologies=["1x2"], batch=None, steps_flag=None) | given
    return init_marker.plan(repo, found, **options)


# --- the script and its flags --------------------------------------------------------------------------------
def test_the_one_training_script_is_found_and_tests_and_helpers_are_not_candidates(tmp_path):
    repo = _repo(tmp_path, TRAIN)
    (repo / "utils.py").write_text("def helper():\n    return 1\n")  # no __main__, no training
    (repo / "tests").mkdir()
    shutil.copy(TRAIN, repo / "tests" / "train_copy.py")  # under tests/: not the team's script
    assert init_script.find_script(repo, None) == repo / "train.py"


def test_no_script_or_several_are_refused_naming_what_to_pass(tmp_path):
    repo = _repo(tmp_path)
    with pytest.raises(ScalegateError, match="no training script found") as err:
        init_script.find_script(repo, None)
    assert "--script" in err.value.hint
    repo = _repo(tmp_path / "two", TRAIN, ZOO / "lightning_fit.py")
    with pytest.raises(ScalegateError, match="2 training scripts found in .*: lightning_fit.py, train.py") as err:
        init_script.find_script(repo, None)
    assert "init --script lightning_fit.py" in err.value.hint
    with pytest.raises(ScalegateError, match="--script nope.py: no such file"):
        init_script.find_script(repo, "nope.py")


@pytest.mark.parametrize(
    "script, argv, strategies, batch",
    [
        (TRAIN, ("--strategy={strategy}", "--max-steps={steps}"), ("ddp",), 32),
        (ZOO / "hf_trainer.py", ("--strategy={strategy}", "--max-steps={steps}"), ("ddp",), 8),
        (
            ZOO / "lightning_fit.py",
            ("--strategy={strategy}", "--max-steps={steps}", "--devices={nproc_per_node}", "--num-nodes={nnodes}"),
            ("ddp",),
            32,
        ),
        (ZOO / "accelerate_loop.py", ("--max-train-steps={steps}",), ("ddp",), 32),  # 32 x its default accumulation 1
        # 8 x 8 micro-batches: nanoGPT's global batch, which init cannot tell from a rank's (docs: scaling="strong")
        (ZOO / "torch_accum.py", ("--max-iters={steps}",), ("ddp",), 64),
    ],
)
def test_the_marker_gives_each_stack_its_steps_strategy_and_shape(tmp_path, script, argv, strategies, batch):
    repo = _repo(tmp_path, script)
    marker = _plan(repo, script.name)
    assert (marker.argv, marker.strategies, marker.batch) == (argv, strategies, batch)
    init_marker.validated(marker.with_pattern(r"loss (\d+)"), repo)  # pytest's own checks of the marker


def test_the_marker_refuses_strategies_the_script_does_not_take_and_a_script_without_steps(tmp_path):
    repo = _repo(tmp_path, ZOO / "hf_trainer.py", ZOO / "deepspeed_engine.py")
    assert _plan(repo, "hf_trainer.py", strategies=["ddp", "zero2"]).strategies == ("ddp", "zero2")
    with pytest.raises(ScalegateError, match="hf_trainer.py's --strategy takes ddp, zero2, zero3, fsdp"):
        _plan(repo, "hf_trainer.py", strategies=["zero9"])
    (repo / "nosteps.py").write_text("import argparse\np = argparse.ArgumentParser()\np.add_argument('--lr')\n")
    with pytest.raises(ScalegateError, match=r"takes no flag for its number of steps .* \(--lr\)") as err:
        _plan(repo, "nosteps.py")
    assert "--steps-flag" in err.value.hint
    assert _plan(repo, "nosteps.py", steps_flag="--epochs").argv == ("--epochs={steps}",)
    with pytest.raises(ScalegateError, match="no strategy flag"):
        _plan(repo, "nosteps.py", steps_flag="--epochs", strategies=["ddp", "fsdp"])


def test_the_written_test_file_collects_with_its_marker(tmp_path):
    marker = _plan(_repo(tmp_path, ZOO / "lightning_fit.py"), "lightning_fit.py")
    text = init_marker.test_file(marker.with_pattern(r"step (\d+) train_loss ([0-9.eE+-]+)"))
    compile(text, "test_lightning_fit.py", "exec")
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--line-length", "120", "-"],
        input=text,
        capture_output=True,
        text=True,
    ).returncode
    assert formatted == 0, "the written test file is not as ruff formats it"
    assert '"--devices={nproc_per_node}",' in text and 'loss_pattern=r"step (\\d+) train_loss' in text
    assert "def test_lightning_fit(scaling_case, benchmark):" in text and "canary=True" in text


# --- the loss pattern, against what a run printed ------------------------------------------------------------
LINES = {
    "hf": "{'loss': '4.145', 'grad_norm': '2.244', 'learning_rate': '0.0009', 'epoch': '0.02'}",
    "lightning": "step 3 train_loss 2.2914",
    "accelerate": "11/25/2026 14:54:46 - INFO - __main__ - [RANK 0] step 3: loss 1.1396",
    "titan": "\x1b[31mstep:  3  \x1b[32mloss:  4.1210  \x1b[33mmemory:  1.2GiB",
    "nanogpt": "iter 3: loss 2.1000, time 35.2ms",
    "own words": "epoch 0 | it 7 | Loss=0.731",
}


@pytest.mark.parametrize("stack", sorted(LINES))
def test_a_common_stacks_loss_line_is_found_without_a_pattern(stack):
    probe = init_probe.Probe(command=[], lines=["W1127 torchrun warming up", LINES[stack], "done"])
    pattern, read = init_probe.loss_pattern(None, probe, "train.py")
    assert read == [LINES[stack]], pattern


def test_a_pattern_that_matches_nothing_is_refused_with_the_lines_the_run_printed():
    probe = init_probe.Probe(command=[], lines=["starting", "epoch 0 acc 0.51", "epoch 1 acc 0.62"])
    with pytest.raises(ScalegateError) as err:
        init_probe.loss_pattern(r"loss=([0-9.]+)", probe, "train.py")
    said = str(err.value)
    assert "--loss-pattern 'loss=([0-9.]+)' matched none of the 3 lines train.py's short run printed" in said
    assert "  | epoch 1 acc 0.62" in said and "HINT: give a pattern" in said
    with pytest.raises(ScalegateError, match="no loss line found in what train.py's short run printed"):
        init_probe.loss_pattern(None, probe, "train.py")
    with pytest.raises(ScalegateError, match="has 3 groups"):
        init_probe.loss_pattern(r"(a)(b)(c)", probe, "train.py")


# --- the files -----------------------------------------------------------------------------------------------
def _rendering(install: str = "scalegate", **cluster) -> init_ci.Rendering:
    """What init renders the CI files with: no cluster named (a GPU runner of its own), else the one given."""
    given = init_cluster.Given(values=cluster, where={k: f"--{k}" for k in cluster})
    return init_ci.Rendering(install=install, cluster=given.resolved(["1x2"]), paths=("train.py", "ci/scalegate*"))


@pytest.mark.parametrize("cluster", [{}, {"nodes": 2, "gpus_per_node": 8}], ids=["runner", "login-node"])
def test_every_template_renders_every_token_and_parses(tmp_path, cluster):
    outputs = init_ci.files(
        list(init_ci.CI), _rendering("scalegate @ git+https://example.org/scalegate@abc123", **cluster)
    )
    assert [path for path, _, _ in outputs] == [
        ".github/workflows/scalegate.yml",
        "ci/scalegate.gitlab-ci.yml",
        "ci/scalegate-pr.sbatch",
        "ci/scalegate-nightly.sbatch",
        "ci/scalegate-submit.sh",
    ]
    for path, text, _ in outputs:
        assert not re.search(r"@[A-Z_]+@", text), f"{path}: a token left"
        if not path.endswith("submit.sh"):
            assert 'python -m pip install "scalegate @ git+https://example.org/scalegate@abc123"' in text
        if path.endswith(".yml"):
            yaml.safe_load(text)
        else:
            script = tmp_path / Path(path).name
            script.write_text(text)
            subprocess.run(["bash", "-n", str(script)], check=True)
        assert "setup.sh" not in text and ".venv" not in text
    workflow = yaml.safe_load(outputs[0][1])
    assert workflow.get("on", workflow.get(True)) == {"pull_request": {"paths": ["train.py", "ci/scalegate*"]}}
    assert "gh pr comment" in outputs[0][1] and "GITHUB_STEP_SUMMARY" in outputs[0][1]
    assert "merge_requests/$CI_MERGE_REQUEST_IID/notes" in outputs[1][1]
    steps = workflow["jobs"]["gate"]["steps"]
    gate = next(s["run"] for s in steps if s.get("id") == "gate")
    assert ("bash ci/scalegate-submit.sh" in gate) == bool(cluster)
    assert ("python -m scalegate gate" in gate) == (not cluster)


@pytest.mark.parametrize("earlier", [True, False], ids=["edited", "posted"])
def test_the_pr_templates_edit_the_gates_earlier_comment_and_post_one_where_there_is_none(tmp_path, earlier):
    """On every push the gate's table replaces its own earlier comment (GitHub) or note (GitLab), found by the
    table's title, instead of adding one more; the first push posts it. Another comment is left alone."""
    github, gitlab = (text for _, text, _ in init_ci.files(["github", "gitlab"], _rendering()))
    post = next(s for s in yaml.safe_load(github)["jobs"]["gate"]["steps"] if "gh pr comment" in s.get("run", ""))
    notes = yaml.safe_load(gitlab)["scalegate"]["after_script"][-1]
    for name, script in (("gh", post["run"]), ("curl", notes)):
        where = tmp_path / name
        env = ci_standins.install(where)
        earlier_ones = [{"id": 7, "body": "LGTM"}] + (
            [{"id": 42, "body": "### scalegate: PR gate (A/B): old"}] if earlier else []
        )
        (where / "comments.json").write_text(json.dumps(earlier_ones))
        (where / "scalegate-gate.md").write_text("### scalegate: PR gate (A/B): x against y\n")
        env |= {
            "PR": "5", "GITHUB_REPOSITORY": "team/repo", "GITHUB_STEP_SUMMARY": str(where / "summary"),
            "SCALEGATE_GITLAB_TOKEN": "t", "CI_API_V4_URL": "https://gl/api/v4", "CI_PROJECT_ID": "1",
            "CI_MERGE_REQUEST_IID": "5",
        }  # fmt: skip
        done = subprocess.run(["bash", "-ec", script], cwd=where, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        bodies = {c["id"]: c["body"] for c in ci_standins.comments(where)}
        assert bodies[7] == "LGTM" and len(bodies) == 2, bodies
        ours = [b for b in bodies.values() if b.startswith("### scalegate: PR gate")]
        assert ours == ["### scalegate: PR gate (A/B): x against y\n"], bodies
        assert (42 in bodies) == earlier, "an earlier comment is edited in place, none is posted beside it"


def test_a_repository_configuring_pytest_elsewhere_gets_a_note_not_a_pytest_ini(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\ntestpaths = ['tests']\n")
    config, note = init_files.pytest_config(tmp_path)
    assert config is None and "pyproject.toml's [tool.pytest.ini_options]" in note and "scaling_tests" in note
    (tmp_path / "pyproject.toml").unlink()
    config, note = init_files.pytest_config(tmp_path)
    assert config is not None and "testpaths = scaling_tests" in config.text and not note


# --- the command's bad input: exit 2, one error and its HINT, nothing written --------------------------------
def _init(monkeypatch, capsys, repo: Path, *args: str) -> tuple[int, str, str]:
    """The command in this process, main's handling of bad input included: (exit code, stdout, stderr)."""
    from scalegate.cli.main import main

    monkeypatch.chdir(repo)
    code = main(["init", *args])
    said = capsys.readouterr()
    return code, said.out, said.err


def test_init_refuses_to_overwrite_before_running_anything_and_names_the_files(tmp_path, monkeypatch, capsys):
    repo = _repo(tmp_path, TRAIN)
    (repo / "pytest.ini").write_text("[pytest]\n")
    code, out, err = _init(monkeypatch, capsys, repo, "--ci", "github")
    assert code == 2, err
    assert "error: init would overwrite pytest.ini in" in err and "--force" in err
    assert "short run" not in out  # refused before the run
    assert not (repo / "scaling_tests").exists() and (repo / "pytest.ini").read_text() == "[pytest]\n"


def test_init_refuses_a_loss_pattern_that_matches_nothing_in_a_real_short_run(tmp_path, monkeypatch, capsys):
    repo = _repo(tmp_path, TRAIN)
    args = ("--loss-pattern", r"accuracy ([0-9.]+)", "--probe-steps", "3", "--ci", "none")
    code, out, err = _init(monkeypatch, capsys, repo, *args)
    assert code == 2, err[-3000:]
    assert "error: --loss-pattern 'accuracy ([0-9.]+)' matched none of the" in err, err[-3000:]
    assert "  | step 2 loss " in err  # the lines it saw
    assert not (repo / "scaling_tests").exists() and not (repo / "pytest.ini").exists()


def test_a_short_run_that_fails_shows_the_ranks_error_not_torchruns_report(tmp_path, monkeypatch, capsys):
    repo = _repo(tmp_path, TRAIN)
    script = (repo / "train.py").read_text()
    # rank 1 fails after the process group is up, as a script's bug does; torchrun then prints ~35 lines of its own
    broken = "    if dist.is_initialized() and dist.get_rank() == 1:\n        raise ValueError('a bug on rank 1')\n"
    script = script.replace("    for step in range(", broken + "    for step in range(", 1)
    assert "a bug on rank 1" in script
    (repo / "train.py").write_text(script)
    code, out, err = _init(monkeypatch, capsys, repo, "--probe-steps", "3", "--ci", "none")
    assert code == 2, err[-3000:]
    assert "error: the short run of train.py exited 1" in err, err[-3000:]
    assert "[rank1]: ValueError: a bug on rank 1" in err, err[-3000:]  # the cause, within the lines shown
    assert "failed (exitcode: 1)" in err and "torchrun's own traceback and failure report" in err
    assert "Root Cause" not in err and "HINT: make the script run under torchrun" in err
    assert not (repo / "scaling_tests").exists()


def test_the_short_runs_ranks_end_as_a_gates_ranks_do_not_through_the_interpreters_teardown(
    tmp_path, monkeypatch, capsys
):
    """A gate's ranks end without the interpreter's teardown (worker/ending.py), where torch can abort a gloo rank
    that finished ("terminate called without an active exception": about one short run in ten of the example script
    with torch 2.13 here, the init test's CI flake). A script whose own object aborts in that teardown, every time,
    stands in for it: init's short run passes, as a gate's launch would."""
    repo = _repo(tmp_path, TRAIN)
    script = (repo / "train.py").read_text()
    aborts = (
        "class _AbortsInTeardown:\n    def __del__(self):\n        os.abort()\n\n\n_kept = _AbortsInTeardown()\n\n\n"
    )
    script = script.replace("def main() -> None:", aborts + "def main() -> None:", 1)
    assert "_AbortsInTeardown()" in script and "import os" in script
    (repo / "train.py").write_text(script)
    alone = subprocess.run([sys.executable, "train.py", "--max-steps", "2"], cwd=repo, capture_output=True, text=True)
    assert alone.returncode == -6, alone  # run alone, its teardown aborts it
    code, out, err = _init(monkeypatch, capsys, repo, "--probe-steps", "3", "--ci", "none")
    assert code == 0, err[-3000:]
    assert "-m scalegate.worker.short_run train.py" in out


def test_init_refuses_scalegates_own_repository(monkeypatch, capsys):
    code, _, err = _init(monkeypatch, capsys, ROOT, "--ci", "none")
    assert code == 2 and "is scalegate's own repository" in err, err
