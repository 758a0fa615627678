"""A new user's path from nothing to a gated pull request, walked for real (docs/gate-your-repository.md).

A team's environment that already has its torch (tests/envs.py: a fresh venv that sees this suite's packages but
scalegate, pip offline); scalegate installed into it with the README's commands, a clone of this checkout at the
release tag, its wheel built and installed; a git repository holding a training script and nothing of scalegate;
``python -m scalegate init``; then the commands the CI files it wrote run, taken from those files: the nightly's
(``pytest``, whose 1x2 case must pass, the report, the history) and the PR gate's (``gate --base HEAD``, which must
pass: A/A). Every file parses and runs no command but these. The test asserts that pip installed scalegate alone and
that ``import torch`` gives the same file and version after the install.

Default tier: the plain torch DDP script (examples/train_script/train.py). Nightly: the HF Trainer and Lightning
scripts of examples/zoo, whose flags (``--max-steps``, ``--devices``, ``--num-nodes``) init must find; and the same
DDP script on slurm/two-node-cluster.sh's two SLURM nodes, its GitHub and GitLab jobs' own shell run on the login
node (gh and curl stand-ins: tests/ci_standins.py), each push submitting the PR gate with sbatch --wait.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests import ci_standins, envs
from tests.conftest import ROOT
from tests.repos import base_trees_left, checkout_repo, commit_change, git
from tests.test_install import release

# The README's install: a clone of scalegate at its release tag (the CHANGELOG's latest), its wheel, into the team's
# environment
INSTALL_COMMANDS = (
    f"git -C scalegate checkout v{release()}",
    "python -m pip wheel --no-deps -w dist ./scalegate",
    f"python -m pip install dist/scalegate-{release()}-py3-none-any.whl",
)
FEW = "--scaling-steps 5 --scaling-warmup 2"
# the A/A gate in one round of one launch a side: the path, not a verdict (an undecided A/A passes, noisy)
GATE_BOUNDS = f"{FEW} --scaling-max-launches 1 --scaling-launches 1 --scaling-reference-launches 1 --max-minutes 6"
COMMAND = re.compile(r"python -m (?:pip install|scalegate|pytest)\b[^|;&\n]*")


@dataclass(frozen=True)
class TeamEnv:
    python: Path
    env: dict[str, str]
    install: str  # the command that installed scalegate: the README's, with this checkout as the URL


def _bash(command: str, cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _said(done: subprocess.CompletedProcess) -> str:
    return (done.stdout + done.stderr)[-4000:]


@pytest.fixture(scope="module")
def team_env(tmp_path_factory) -> TeamEnv:
    where = tmp_path_factory.mktemp("team-env")
    fresh = envs.beside_torch(where)
    env, site, torch_probe = fresh.env, fresh.site, envs.TORCH_PROBE
    before = _bash(f"python -c '{torch_probe}'", where, env)
    assert before.returncode == 0, _said(before)
    source = where / "scalegate"
    checkout_repo(source)  # this checkout's files, uncommitted changes too, as a repository of one commit
    git(source, "tag", f"v{release()}")  # ... at the release the README installs
    for command in INSTALL_COMMANDS[:-1]:  # the README's: the checkout at its tag, its wheel
        done = _bash(command, where, env)
        assert done.returncode == 0, f"{command}\n{_said(done)}"
    install = INSTALL_COMMANDS[-1]
    done = _bash(install, where, env)
    assert done.returncode == 0, _said(done)
    installed = re.findall(r"^Successfully installed (.+)$", done.stdout, flags=re.M)
    assert len(installed) == 1 and re.fullmatch(r"scalegate-\S+", installed[0]), f"pip installed {installed}"
    after = _bash(f"python -c '{torch_probe}'", where, env)
    assert after.stdout == before.stdout, f"torch was {before.stdout} and is {after.stdout} after the install"
    found = _bash("python -c 'import scalegate; print(scalegate.__file__)'", where, env)
    assert found.stdout.startswith(str(site / "scalegate")), f"scalegate from {found.stdout}, not the install"
    return TeamEnv(python=fresh.python, env=env, install=install)


def _team_repo(tmp_path: Path, script: Path) -> Path:
    repo = tmp_path / "team"
    repo.mkdir()
    shutil.copy(script, repo / script.name)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the team's training script")
    return repo


def _run_commands(text: str) -> list[str]:
    return [m.group(0).rstrip() for m in COMMAND.finditer(text)]


def _template_commands(repo: Path) -> dict[str, list[str]]:
    """Each CI template's commands, from where they run: YAML's run and script entries (the file parsed), a batch
    script's lines that are not comments (its syntax checked by bash -n)."""
    workflow = yaml.safe_load((repo / ".github/workflows/scalegate.yml").read_text())
    gitlab = yaml.safe_load((repo / "ci/scalegate.gitlab-ci.yml").read_text())["scalegate"]
    found = {
        "github": [c for step in workflow["jobs"]["gate"]["steps"] for c in _run_commands(step.get("run", ""))],
        "gitlab": [c for line in gitlab["script"] + gitlab["after_script"] for c in _run_commands(line)],
    }
    for name in ("scalegate-pr.sbatch", "scalegate-nightly.sbatch"):
        path = repo / "ci" / name
        checked = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert checked.returncode == 0, f"{name}: {checked.stderr}"
        lines = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
        found[name] = _run_commands("\n".join(lines))
    return found


def _walk(team_env: TeamEnv, tmp_path: Path, script: Path, case_id: str) -> None:
    repo = _team_repo(tmp_path, script)
    done = _bash(f"python -m scalegate init --script {script.name}", repo, team_env.env)
    assert done.returncode == 0 and "init: wrote" in done.stdout, _said(done)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "scalegate: the scaling cases and CI")
    templates = _template_commands(repo)
    # the CI files install the wheel init ran from, where it lies: on a cluster, the shared filesystem
    [install] = {c for c in templates["github"] + templates["gitlab"] if c.startswith("python -m pip install")}
    assert re.fullmatch(
        rf'python -m pip install "scalegate @ file://\S+/dist/scalegate-{release()}-py3-none-any.whl"', install
    )
    done = _bash(install, repo, team_env.env)
    assert done.returncode == 0, _said(done)
    ran = [install]

    # the nightly, as ci/scalegate-nightly.sbatch runs it: pytest (every case: its 1x2 one passes), report, history
    nightly = {"SCALEGATE_RESULTS": "results/nightly", "SCALEGATE_HISTORY_DB": "results/history.sqlite"}
    nightly_env = team_env.env | nightly | {"SCALEGATE_PYTEST_ARGS": FEW}
    assert [c.split()[2:4] for c in templates["scalegate-nightly.sbatch"]] == [
        ["pytest", "-p"],
        ["scalegate", "report"],
        ["scalegate", "history"],
        ["scalegate", "history"],
    ]
    for command in templates["scalegate-nightly.sbatch"]:
        done = _bash(command, repo, nightly_env)
        assert done.returncode == 0, f"{command}\n{_said(done)}"
        ran.append(command)
    case = json.loads((repo / "results/nightly/latest" / f"{case_id}.json").read_text())
    assert case["status"] == "no-baseline", case["message"]  # passed: a first run has no baseline to judge against

    # the PR gate, as the GitHub workflow runs it: the head against its base (A/A here)
    [gate] = [c for c in templates["github"] if c.startswith("python -m scalegate gate")]
    job_env = yaml.safe_load((repo / ".github/workflows/scalegate.yml").read_text())["jobs"]["gate"]["env"]
    assert job_env["SCALEGATE_GATE_ARGS"] == "--scaling-steps 300 --max-minutes 45"  # the evidence's steps
    job_env |= {"SCALEGATE_BASE": "HEAD", "SCALEGATE_GATE_ARGS": GATE_BOUNDS}
    done = _bash(gate, repo, team_env.env | job_env, 900)
    assert done.returncode == 0, _said(done)
    ran.append(gate)
    verdicts = {c["case_id"]: c["status"] for c in json.loads((repo / "scalegate-gate.json").read_text())["cases"]}
    assert set(verdicts) == {case_id} and verdicts[case_id] in ("ok", "noisy"), verdicts
    assert "PR gate (A/B)" in (repo / "scalegate-gate.md").read_text()  # the PR comment's body

    for template, commands in templates.items():
        assert commands and set(commands) <= set(ran), f"{template} runs {set(commands) - set(ran)}, untested"


def test_the_readme_and_the_guide_install_with_the_commands_this_walk_runs():
    """The walk builds the wheel of a checkout at the release tag and installs it, as the README and the guide say,
    each command as written."""
    for page in (ROOT / "README.md", ROOT / "docs" / "gate-your-repository.md"):
        text = page.read_text()
        for command in INSTALL_COMMANDS:
            assert command in text, f"{page.name} does not show {command!r}"
        assert "python -m scalegate init" in text
    for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:  # and no page installs another release
        named = set(re.findall(r"scalegate-(\d+\.\d+\.\d+)-py3|checkout v(\d+\.\d+\.\d+)", page.read_text()))
        assert {v for pair in named for v in pair if v} <= {release()}, f"{page.name} installs another release"


@pytest.mark.nightly  # a whole user path of a minute or more: the nightly tier (docs/testing.md)
def test_a_plain_torch_ddp_script_is_gated_from_its_own_repository(team_env, tmp_path):
    _walk(team_env, tmp_path, ROOT / "examples" / "train_script" / "train.py", "ddp-train-1x2")


@pytest.mark.slow
@pytest.mark.nightly  # the HF Trainer's imports make each launch slow: measured in docs/testing.md
def test_an_hf_trainer_script_is_gated_from_its_own_repository(team_env, tmp_path):
    _walk(team_env, tmp_path, ROOT / "examples" / "zoo" / "hf_trainer.py", "ddp-hf_trainer-1x2")


@pytest.mark.slow
@pytest.mark.nightly  # as the HF Trainer's walk: docs/testing.md
def test_a_lightning_script_is_gated_from_its_own_repository(team_env, tmp_path):
    """init must find --devices and --num-nodes: Lightning's Trainer refuses a launch of another shape."""
    _walk(team_env, tmp_path, ROOT / "examples" / "zoo" / "lightning_fit.py", "ddp-lightning_fit-1x2")


# Pushes of a team's PR on the two-node cluster: an A/A in one round, and a head whose gradient average beside DDP's
# doubles the bytes between the nodes (the step at W +78-102% here, the 1x1 step unchanged), gated on its step time at
# W too, as docs/detection.md advises for a change between the ranks: the 1x1 reference's noise on this loaded VM
# (-7% to +33% a round) left the efficiency alone undecided after three rounds once
AA_ON_NODES = "--scaling-steps 5 --scaling-warmup 2 --scaling-max-launches 1 --scaling-launches 1 --scaling-reference-launches 1 --max-minutes 6"
SLOWED_ON_NODES = (
    "--scaling-steps 40 --scaling-warmup 2 --scaling-max-launches 4 --scaling-launches 1 --scaling-reference-launches 1 "
    "--scaling-step-time-tolerance 0.05 --max-minutes 10"
)
DOUBLED_TRAFFIC = (
    "train.py",
    "        optimizer.step()\n",
    "        if distributed:  # the PR's own gradient average, on top of DDP's: twice the bytes between the nodes\n"
    "            for p in model.parameters():\n"
    "                dist.all_reduce(p.grad)\n"
    "                p.grad.div_(dist.get_world_size())\n",
)


@dataclass(frozen=True)
class LoginNode:
    """A CI job's shell on the login node: node 0 of slurm/two-node-cluster.sh, in the team's checkout."""

    cluster: str
    repo: Path
    env: dict[str, str]

    def run(self, script: str, **env: str) -> subprocess.CompletedProcess:
        shell = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", f"cd {self.repo} && {script}"]
        return subprocess.run(
            [self.cluster, "run", *shell], env=self.env | env, capture_output=True, text=True, timeout=900
        )


def _github_job(node: LoginNode, job: dict, **env: str) -> tuple[bool, list[str]]:
    """The workflow's gate job as GitHub runs it: each step's ``run`` in order (its actions, checkout and upload,
    are GitHub's own), each step's ``if`` read for the one thing it tests; whether the job failed, and each step's
    output."""
    output = node.repo.parent / "github-output"
    output.write_text("")
    env = {k: str(v) for k, v in job["env"].items()} | env | {"GITHUB_OUTPUT": str(output)}
    failed, said = False, []
    for step in job["steps"]:
        if "run" not in step:
            continue
        condition = step.get("if", "")
        code = dict(line.split("=", 1) for line in output.read_text().splitlines()).get("code", "")
        if "hashFiles('scalegate-gate.md')" in condition and not (node.repo / "scalegate-gate.md").exists():
            continue
        if "steps.gate.outputs.code != '0'" in condition and code == "0":
            continue
        done = node.run(step["run"].replace("${{ steps.gate.outputs.code }}", code), **env)
        said.append(done.stdout + done.stderr)
        failed |= done.returncode != 0 and not step.get("continue-on-error")
    return failed, said


@pytest.mark.slow
@pytest.mark.nightly  # three PR gates across two real SLURM nodes, each submitted with sbatch --wait: ~6 minutes here
def test_a_team_on_two_slurm_nodes_gates_each_push_from_a_login_node(team_env, two_nodes, tmp_path):
    """From a fresh repository and the wheel: ``init --nodes 2 --gpus-per-node 0`` for the two CPU nodes, a commit,
    then the generated CI jobs' own shell on the login node, GitHub's and GitLab's, each submitting the PR gate with
    ``sbatch --wait``: the gate runs on both nodes, an A/A push passes, a push whose cross-node traffic doubled fails
    the job, and the PR's one comment, posted by the first push, is edited by the second."""
    repo = _team_repo(tmp_path, ROOT / "examples" / "train_script" / "train.py")
    done = _bash("python -m scalegate init --script train.py --nodes 2 --gpus-per-node 0", repo, team_env.env)
    assert done.returncode == 0, _said(done)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "scalegate: the scaling cases and CI")
    sbatch = (repo / "ci/scalegate-pr.sbatch").read_text()
    assert "#SBATCH --nodes=2\n" in sbatch and "gpu" not in sbatch.split("set -uo")[0].replace("GPU", "")
    standins = ci_standins.install(tmp_path / "github", team_env.env["PATH"])
    node = LoginNode(cluster=two_nodes, repo=repo, env=team_env.env | standins)
    github = yaml.safe_load((repo / ".github/workflows/scalegate.yml").read_text())["jobs"]["gate"]
    pr = {"GITHUB_REPOSITORY": "team/train", "PR": "5", "GH_TOKEN": "t"}
    summary = tmp_path / "summary"

    # push 1: the PR changes nothing that trains (A/A): the job passes, the comment is posted
    failed, said = _github_job(node, github, **pr, SCALEGATE_BASE="HEAD", SCALEGATE_GATE_ARGS=AA_ON_NODES,
                               GITHUB_STEP_SUMMARY=str(summary))  # fmt: skip
    assert not failed, "\n".join(s[-3000:] for s in said)
    [posted] = ci_standins.comments(tmp_path / "github")
    assert posted["body"].startswith("### scalegate: PR gate (A/B)") and "on 2 node(s)" in posted["body"], posted
    assert "regressed" not in posted["body"] and summary.read_text().startswith("### scalegate: PR gate (A/B)")

    # push 2: the head averages every gradient again beside DDP's: the gate fails the job, the comment is edited
    commit_change(repo, "head: a gradient average beside DDP's", DOUBLED_TRAFFIC)
    failed, said = _github_job(node, github, **pr, SCALEGATE_BASE="HEAD~1", SCALEGATE_GATE_ARGS=SLOWED_ON_NODES,
                               GITHUB_STEP_SUMMARY=str(summary))  # fmt: skip
    assert failed and "the scalegate gate exited 1" in said[-1], "\n".join(s[-3000:] for s in said)
    [edited] = ci_standins.comments(tmp_path / "github")
    assert edited["id"] == posted["id"] and "**FAIL**" in edited["body"] and "❌ regressed" in edited["body"], edited
    assert [c.split()[:3] for c in ci_standins.calls(tmp_path / "github") if "--jq" not in c] == [
        ["gh", "pr", "comment"],
        ["gh", "api", "--method"],
    ]

    # GitLab's job on both pushes: script, then after_script; the job fails exactly when the gate did, one note edited
    gitlab = yaml.safe_load((repo / "ci/scalegate.gitlab-ci.yml").read_text())["scalegate"]
    notes = ci_standins.install(tmp_path / "gitlab", team_env.env["PATH"])
    merge_request = {k: str(v) for k, v in gitlab["variables"].items()} | notes | {
        "SCALEGATE_GITLAB_TOKEN": "t", "CI_API_V4_URL": "https://gitlab.example/api/v4", "CI_PROJECT_ID": "1",
        "CI_MERGE_REQUEST_IID": "5",
    }  # fmt: skip
    for base, args, code in (("HEAD~1", SLOWED_ON_NODES, 1), ("HEAD~2", AA_ON_NODES, 0)):
        if code == 0:  # the next push reverts the head: an A/A against the commit before it
            git(repo, "revert", "--no-edit", "HEAD")
        pushed = merge_request | {"SCALEGATE_BASE": base, "SCALEGATE_GATE_ARGS": args}
        scripts = [node.run(item, **pushed) for item in gitlab["script"]]
        assert [s.returncode for s in scripts] == [0, code], scripts[-1].stdout[-3000:] + scripts[-1].stderr[-3000:]
        for item in gitlab["after_script"]:
            done = node.run(item, **pushed)
            assert done.returncode == 0, done.stderr[-2000:]
        [note] = ci_standins.comments(tmp_path / "gitlab")
        regressed = "❌ regressed" in note["body"]
        assert note["body"].startswith("### scalegate: PR gate (A/B)") and regressed == (code == 1), note
    left = subprocess.run([two_nodes, "run", "squeue", "-h"], capture_output=True, text=True, timeout=60)
    assert left.stdout.strip() == "", f"SLURM jobs left: {left.stdout}"
    assert not base_trees_left(repo)
