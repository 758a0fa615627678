"""``scalegate init`` for a SLURM cluster and the CI around it (harness/scalegate/cli/init_cluster.py, init_ci.py,
init_paths.py, templates/): the jobs' GPU request, read from the batch script and checked by a real slurmctld's
``sbatch --test-only``; the cluster's bad input, through the command; the paths that trigger the gate; the CI jobs'
conditions for a fork's pull request; the login node's submit script on the real local SLURM (refused, ended,
cancelled with its CI job). The whole path on two SLURM nodes runs in tests/test_adopt.py (nightly).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from scalegate.cli import init_ci, init_cluster, init_paths, init_probe
from scalegate.cli.main import main
from tests.conftest import ROOT
from tests.repos import git, outside_slurm_env
from tests.test_slurm import _cluster_up

TRAIN = ROOT / "examples" / "train_script" / "train.py"


def _files(kinds: list[str], topologies: list[str] | None = None, **values) -> dict[str, str]:
    given = init_cluster.Given(values=values, where={k: f"--{k}" for k in values})
    cluster = given.resolved(topologies or given.topologies() or ["1x2"])
    rendering = init_ci.Rendering(install="scalegate", cluster=cluster, paths=("train.py",))
    return {path: text for path, text, _ in init_ci.files(kinds, rendering)}


def _sbatch_lines(text: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in text.splitlines() if line.startswith("#SBATCH ")]


# --- the jobs' request ---------------------------------------------------------------------------------------
def test_the_pr_and_nightly_jobs_ask_every_node_and_its_gpus_and_the_teams_own_settings():
    files = _files(["slurm"], nodes=2, gpus_per_node=8, partition="gpu", account="ml", time="02:00:00")
    pr = _sbatch_lines(files["ci/scalegate-pr.sbatch"])
    assert pr == [
        "--job-name=scalegate-pr", "--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=8", "--exclusive",
        "--partition=gpu", "--account=ml", "--time=02:00:00", "--output=scalegate-pr-%j.out",
    ]  # fmt: skip
    nightly = _sbatch_lines(files["ci/scalegate-nightly.sbatch"])
    assert "--gpus-per-node=8" in nightly and "--nodes=2" in nightly and "--time=04:00:00" in nightly
    assert "srun --ntasks-per-node=1 python -m scalegate gate" in files["ci/scalegate-pr.sbatch"]
    assert "--max-minutes 90" in files["ci/scalegate-pr.sbatch"]  # three quarters of the job's 2 hours
    gres = _sbatch_lines(_files(["slurm"], nodes=1, gpus_per_node=4, gres="gpu:a100")["ci/scalegate-pr.sbatch"])
    assert "--gres=gpu:a100:4" in gres and not any(a.startswith("--gpus") for a in gres)
    cpu = _sbatch_lines(_files(["slurm"], nodes=2, gpus_per_node=0)["ci/scalegate-pr.sbatch"])
    assert not any("gpu" in a or "gres" in a for a in cpu) and "--nodes=2" in cpu
    # no cluster named: the cases' own shape, the GPUs their ranks need
    plain = _sbatch_lines(_files(["slurm"])["ci/scalegate-pr.sbatch"])
    assert "--nodes=1" in plain and "--gpus-per-node=2" in plain


def test_the_setup_line_and_the_results_directory_are_the_teams_never_this_repositorys():
    files = _files(
        ["slurm", "github"], nodes=2, gpus_per_node=8, setup="module load cuda && source /shared/env/bin/activate",
        results_dir="/shared/scalegate",
    )  # fmt: skip
    for path, text in files.items():
        assert ".venv" not in text and "setup.sh" not in text and str(ROOT) not in text, path
    pr = files["ci/scalegate-pr.sbatch"]
    setup = pr.index("module load cuda && source /shared/env/bin/activate\n")
    assert pr.index("#SBATCH --time") < setup < pr.index("srun --ntasks-per-node=1 python -m scalegate gate")
    assert "SCALEGATE_RESULTS:-/shared/scalegate/pr-" in pr
    assert "SCALEGATE_HISTORY_DB:=/shared/scalegate/history.sqlite" in files["ci/scalegate-nightly.sbatch"]


@pytest.fixture
def gpu_controller(tmp_path):
    """A real slurmctld of its own (its port, config and state under tmp_path), whose one partition holds two nodes
    of 8 GPUs each, powered down (``State=CLOUD``): ``sbatch --test-only`` checks a job's GPU request against them,
    with no slurmd and no GPU. Needs root, slurmctld and a running munged (slurm/local-cluster.sh start)."""
    if os.geteuid() != 0 or shutil.which("slurmctld") is None or shutil.which("sbatch") is None:
        pytest.skip("a slurmctld of its own needs root and SLURM (slurm/local-cluster.sh start installs it)")
    if subprocess.run(["munge", "-n"], capture_output=True, stdin=subprocess.DEVNULL).returncode != 0:
        pytest.skip("munged is not running (slurm/local-cluster.sh start)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "state").mkdir()
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        f"ClusterName=gpucheck\nSlurmctldHost=localhost\nSlurmctldPort={port}\nSlurmUser=root\nAuthType=auth/munge\n"
        "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/cons_tres\n"
        "SelectTypeParameters=CR_Core\nGresTypes=gpu\nJobAcctGatherType=jobacct_gather/none\n"
        f"StateSaveLocation={tmp_path}/state\nSlurmctldPidFile={tmp_path}/slurmctld.pid\n"
        f"SlurmctldLogFile={tmp_path}/slurmctld.log\nSuspendProgram=/bin/true\nResumeProgram=/bin/true\n"
        "NodeName=gpu[1-2] CPUs=32 RealMemory=100000 Gres=gpu:8 State=CLOUD\n"
        "PartitionName=gpu Nodes=gpu[1-2] Default=YES MaxTime=INFINITE State=UP\n"
    )
    env = {**outside_slurm_env(), "SLURM_CONF": str(conf)}
    controller = subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(conf)], env=env, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if subprocess.run(["sinfo", "-h"], env=env, capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        yield env
    finally:
        controller.terminate()
        controller.wait(timeout=30)


def test_the_generated_pr_job_with_8_gpus_a_node_passes_sbatch_test_only(tmp_path, gpu_controller):
    """The GPU request read from the batch script init wrote, then ``sbatch --test-only`` on a SLURM whose nodes have
    8 GPUs: 2 nodes x 8 GPUs (as --gpus-per-node, and as --gres) fit; 9 a node do not, so the check can fail."""
    outcomes = {}
    for name, values in {
        "gpus-per-node 8": {"gpus_per_node": 8},
        "gres 8": {"gpus_per_node": 8, "gres": "gpu"},
        "gpus-per-node 9": {"gpus_per_node": 9},
    }.items():
        text = _files(["slurm"], nodes=2, partition="gpu", **values)["ci/scalegate-pr.sbatch"]
        asked = [a for a in _sbatch_lines(text) if "gpu" in a and "partition" not in a]
        assert asked == [f"--gres=gpu:{values['gpus_per_node']}" if "gres" in values else f"--gpus-per-node={values['gpus_per_node']}"]  # fmt: skip
        script = tmp_path / f"{name.replace(' ', '-')}.sbatch"
        script.write_text(text)
        done = subprocess.run(
            ["sbatch", "--test-only", str(script)], env=gpu_controller, capture_output=True, text=True
        )
        outcomes[name] = (done.returncode, done.stderr.strip().splitlines()[-1])
    assert outcomes["gpus-per-node 8"][0] == 0 and "on nodes gpu[1-2]" in outcomes["gpus-per-node 8"][1], outcomes
    assert outcomes["gres 8"][0] == 0, outcomes
    assert outcomes["gpus-per-node 9"] == (1, "allocation failure: Requested node configuration is not available")


# --- bad input: one line naming it and the fix, exit 2, nothing written ----------------------------------------
@pytest.mark.parametrize(
    "args, said",
    [
        (["--nodes", "0"], "error: --nodes 0 is not a whole number >= 1"),
        (["--gpus-per-node", "-1"], "error: --gpus-per-node -1 is not a whole number >= 0"),
        (["--time", "an hour"], "error: --time 'an hour' is not a SLURM time limit"),
        (["--time", "0"], "error: --time '0' is not a SLURM time limit of a minute or more"),
        (["--partition", "gpu; rm -rf /"], "error: --partition 'gpu; rm -rf /' is not a SLURM name"),
        (["--nodes", "1", "--topologies", "2x8"], "error: --topologies 2x8: 2x8 needs 2 node(s) x 8 GPU(s)"),
        (["--profile", "nope.toml"], "error: --profile nope.toml: No such file or directory"),
        (["--profile", "bad.toml"], "error: --profile bad.toml is not TOML"),
        (["--profile", "other.toml"], "error: --profile other.toml has no [cluster] table"),
        (["--profile", "typo.toml"], "error: --profile typo.toml: [cluster] has no key 'gpus'"),
        (["--profile", "kinds.toml"], "error: kinds.toml's nodes 'two' is not a whole number >= 1"),
    ],
)
def test_a_bad_cluster_is_refused_in_one_line_with_its_fix_before_anything_runs(
    tmp_path, monkeypatch, capsys, args, said
):
    repo = tmp_path / "team"
    repo.mkdir()
    git(repo, "init", "-q")
    shutil.copy(TRAIN, repo / "train.py")
    (repo / "bad.toml").write_text("[cluster\nnodes = 2\n")
    (repo / "other.toml").write_text("[tool]\nx = 1\n")
    (repo / "typo.toml").write_text("[cluster]\ngpus = 8\n")
    (repo / "kinds.toml").write_text('[cluster]\nnodes = "two"\n')
    monkeypatch.chdir(repo)
    code = main(["init", "--script", "train.py", *args])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert err.startswith(said) and "HINT: " in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 2, err  # the error and its HINT
    assert "short run" not in out and not (repo / "scaling_tests").exists()


def test_flags_win_over_the_profiles_cluster_table(tmp_path):
    profile = tmp_path / "site.toml"
    profile.write_text(
        '[cluster]\nnodes = 4\ngpus_per_node = 8\npartition = "a100"\nsetup = "source /e/bin/activate"\n'
    )
    args = init_cluster.argparse.Namespace(profile=str(profile), **dict.fromkeys(init_cluster.FLAGS))
    args.partition = "h100"
    given = init_cluster.given(args)
    cluster = given.resolved(given.topologies())
    assert (cluster.nodes, cluster.gpus_per_node, cluster.partition, cluster.setup) == (
        4,
        8,
        "h100",
        "source /e/bin/activate",
    )
    assert given.topologies() == ["4x8"] and cluster.declared


# --- what triggers the gate --------------------------------------------------------------------------------------
def test_the_trigger_paths_are_the_scripts_own_imports_followed_and_the_dependency_files(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "__init__.py").write_text("from .layers import Block\n")
    (tmp_path / "model" / "layers.py").write_text("import torch\n")
    (tmp_path / "data.py").write_text("import numpy\nfrom model import layers\n")
    (tmp_path / "unrelated.py").write_text("print('not imported')\n")
    (tmp_path / "train.py").write_text("import os, torch\nimport data\nfrom model import Block\n")
    (tmp_path / "requirements-train.txt").write_text("torch\n")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    paths = init_paths.trigger_paths(tmp_path, tmp_path / "train.py", ".github/workflows/scalegate.yml")
    assert paths == [
        "train.py", "data.py", "model/**", "pyproject.toml", "requirements-train.txt", "scaling_tests/**",
        "pytest.ini", "ci/scalegate*", ".github/workflows/scalegate.yml",
    ]  # fmt: skip


# --- the CI jobs' conditions -------------------------------------------------------------------------------------
def _github_if(expression: str, context: dict[str, str]) -> bool:
    """A GitHub expression of context paths, ==, !=, && and || (its strings compared without case, as GitHub does)."""
    python = re.sub(r"github(?:\.[\w-]+)+", lambda m: repr(context[m.group(0)].lower()), expression)
    return bool(eval(python.replace("&&", " and ").replace("||", " or "), {"__builtins__": {}}))  # noqa: S307


def _gitlab_if(expression: str, variables: dict[str, str]) -> bool:
    """A GitLab rule's ``if:`` of $VARIABLES, "strings", ==, != and &&."""
    python = re.sub(r"\$(\w+)", lambda m: repr(variables.get(m.group(1), "")), expression)
    return bool(eval(python.replace("&&", " and ").replace("||", " or "), {"__builtins__": {}}))  # noqa: S307


@pytest.mark.parametrize("cluster", [{}, {"nodes": 2, "gpus_per_node": 8}], ids=["runner", "login-node"])
def test_a_forks_pull_request_leaves_the_gate_skipped_and_says_why(tmp_path, cluster):
    files = _files(["github", "gitlab"], **cluster)
    workflow = yaml.safe_load(files[".github/workflows/scalegate.yml"])
    jobs = workflow["jobs"]
    fork = {"github.repository": "team/train", "github.event.pull_request.head.repo.full_name": "someone/train"}
    own = fork | {"github.event.pull_request.head.repo.full_name": "Team/train"}
    assert not _github_if(jobs["gate"]["if"], fork) and _github_if(jobs["fork"]["if"], fork)
    assert _github_if(jobs["gate"]["if"], own) and not _github_if(jobs["fork"]["if"], own)
    assert jobs["gate"]["runs-on"] == (["self-hosted", "slurm"] if cluster else ["self-hosted", "gpu"])
    assert jobs["fork"]["runs-on"] == "ubuntu-latest" and "uses" not in str(jobs["fork"]["steps"])  # no checkout
    assert workflow["permissions"] == {} and jobs["gate"]["permissions"] == {
        "contents": "read",
        "pull-requests": "write",
    }
    assert (
        workflow["concurrency"]["cancel-in-progress"] is True
        and "pull_request.number" in workflow["concurrency"]["group"]
    )
    summary = tmp_path / "summary"
    [step] = jobs["fork"]["steps"]
    env = {"PATH": "/usr/bin:/bin", "GITHUB_STEP_SUMMARY": str(summary), "FORK": "someone/train"}
    subprocess.run(["bash", "-ec", step["run"]], env=env, check=True)
    assert summary.read_text().startswith("scalegate: skipped: this pull request comes from the fork someone/train")

    gitlab = yaml.safe_load(files["ci/scalegate.gitlab-ci.yml"])
    variables = {
        "CI_PIPELINE_SOURCE": "merge_request_event",
        "CI_PROJECT_ID": "7",
        "CI_MERGE_REQUEST_SOURCE_PROJECT_ID": "9",
    }
    [gate_rule], [fork_rule] = gitlab["scalegate"]["rules"], gitlab["scalegate-fork"]["rules"]
    assert not _gitlab_if(gate_rule["if"], variables) and _gitlab_if(fork_rule["if"], variables)
    variables["CI_MERGE_REQUEST_SOURCE_PROJECT_ID"] = "7"
    assert _gitlab_if(gate_rule["if"], variables) and not _gitlab_if(fork_rule["if"], variables)
    assert gate_rule["changes"]["paths"] == ["train.py"] and gitlab["scalegate"]["interruptible"] is True
    assert gitlab["scalegate-fork"]["variables"] == {"GIT_STRATEGY": "none"} and "tags" not in gitlab["scalegate-fork"]


# --- the short run's step time -----------------------------------------------------------------------------------
def test_the_short_runs_step_is_timed_from_its_loss_lines():
    lines = ["W torchrun", *(f"step {n} loss 2.{n}" for n in range(6)), "done"]
    times = [0.0, 3.0, 3.5, 3.51, 3.52, 3.53, 3.54, 3.6]  # step 0 after start-up, step 1 after warm-up
    probe = init_probe.Probe(command=[], lines=lines, times=times)
    assert init_probe.step_seconds(r"step (\d+) loss ([0-9.]+)", probe) == pytest.approx(0.01)
    every_other = init_probe.Probe(command=[], lines=lines[::2], times=times[::2])  # logged every second step
    assert init_probe.step_seconds(r"step (\d+) loss ([0-9.]+)", every_other) is None  # too few to say
    assert init_probe.step_seconds(r"step (\d+) loss ([0-9.]+)", init_probe.Probe(command=[], lines=lines)) is None


# --- the login node's submit script, on the real local SLURM ------------------------------------------------------
def _submit_repo(tmp_path: Path, job: str) -> Path:
    """A checkout holding the submit script init writes and, as its PR job, a few lines standing in for the gate."""
    repo = tmp_path / "checkout"
    (repo / "ci").mkdir(parents=True)
    (repo / "ci" / "scalegate-submit.sh").write_text(_files(["slurm"])["ci/scalegate-submit.sh"])
    (repo / "ci" / "scalegate-pr.sbatch").write_text(
        "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --time=5\n#SBATCH --output=scalegate-pr-%j.out\n"
        f'cd "$SLURM_SUBMIT_DIR"\n{job}\n'
    )
    return repo


def _submit(repo: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        ["bash", "ci/scalegate-submit.sh"], cwd=repo, env={**outside_slurm_env(), "SCALEGATE_BASE": "HEAD", **env},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


@pytest.fixture
def local_slurm():
    reason = _cluster_up()
    if reason:
        pytest.skip(reason)


def test_the_submit_script_exits_with_the_gates_code_and_leaves_its_table(tmp_path, local_slurm):
    gate = (
        'test "$SCALEGATE_BASE" = HEAD && echo "### scalegate: PR gate (A/B): x against y" > scalegate-gate.md; exit 1'
    )
    repo = _submit_repo(tmp_path, gate)
    done = _submit(repo)
    out = done.communicate(timeout=120)[0]
    assert done.returncode == 1, out
    assert (repo / "scalegate-gate.md").read_text().startswith(
        "### scalegate: PR gate (A/B)"
    ) and "the gate exited 1" in out


def test_the_submit_script_says_when_slurm_refused_the_job_or_it_ended_without_a_table(tmp_path, local_slurm):
    repo = _submit_repo(tmp_path, "exit 0")
    refused = _submit(repo, SBATCH_PARTITION="no-such-partition")
    out = refused.communicate(timeout=120)[0]
    body = (repo / "scalegate-gate.md").read_text()
    assert refused.returncode == 2, out
    assert body.startswith("### scalegate: PR gate\n\n**NO VERDICT**: SLURM refused the job: ") and "partition" in body
    ended = _submit(repo)
    out = ended.communicate(timeout=120)[0]
    assert ended.returncode == 2 and "with exit code 0 and no table" in (repo / "scalegate-gate.md").read_text(), out


def test_a_cancelled_ci_job_cancels_its_slurm_job_and_says_so(tmp_path, local_slurm):
    repo = _submit_repo(tmp_path, "sleep 300")
    submit = _submit(repo)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            job = (repo / "scalegate-job").read_text().strip() if (repo / "scalegate-job").exists() else ""
            state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True).stdout
            if job and state.strip() == "RUNNING":
                break
            time.sleep(0.5)
        submit.send_signal(signal.SIGTERM)  # as the CI runner stops a cancelled or timed-out job's step
        out = submit.communicate(timeout=60)[0]
    finally:
        if submit.poll() is None:
            submit.kill()
    assert submit.returncode == 2, out
    for _ in range(60):  # COMPLETING while its processes end
        shown = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True).stdout
        if "JobState=COMPLETING" not in shown:
            break
        time.sleep(0.5)
    assert "JobState=CANCELLED" in shown, shown
    body = (repo / "scalegate-gate.md").read_text()
    assert f"while SLURM job {job} was RUNNING; the SLURM job was cancelled with it (scancel {job})" in body, body


def test_this_repositorys_own_pr_workflow_skips_a_forks_pull_request_too():
    """.github/workflows/scaling.yml runs on the project's own SLURM runner: a fork's pull request must not."""
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "scaling.yml").read_text())
    jobs = workflow["jobs"]
    fork = {"github.repository": "scalegate/scalegate", "github.event.pull_request.head.repo.full_name": "x/scalegate"}
    assert not _github_if(jobs["scaling"]["if"], fork) and _github_if(jobs["fork"]["if"], fork)
    assert workflow["permissions"] == {} and jobs["fork"]["runs-on"] == "ubuntu-latest"
