"""A new user's path from nothing to a gated pull request, walked for real (docs/gate-your-repository.md).

A team's environment that already has its torch; scalegate installed into it with the README's command, built from
this checkout; a git repository holding a training script and nothing of scalegate; ``python -m scalegate init``;
then the commands the CI templates it wrote run, taken from those templates: the nightly's (``pytest``, whose 1x2
case must pass, the report, the history) and the PR gate's (``gate --base HEAD``, which must pass: A/A). Every
template parses and runs no command but these.

The team's environment is a fresh venv (``--without-pip``) whose site-packages hold one ``.pth`` line: a folder of
links to this suite's installed packages (torch, pytest, transformers, lightning, pip, setuptools, ...), all but
scalegate. pip runs offline (``PIP_NO_INDEX``), so nothing can be downloaded, and builds the wheel with the
packages it sees (``PIP_NO_BUILD_ISOLATION=0``). torch can then be neither upgraded in place nor downloaded: an
install that wanted another torch would fail, or put a second one into the venv's own site-packages, first on the
path. The test asserts that pip installed scalegate alone and that ``import torch`` gives the same file and version
after the install as before. Installing torch itself into the venv (25 s here, from the local wheel) would make the
same check, with scalegate's dependencies, transformers and lightning then downloaded in every run.

Default tier: the plain torch DDP script (examples/train_script/train.py). Nightly: the HF Trainer and Lightning
scripts of examples/zoo, whose flags (``--max-steps``, ``--devices``, ``--num-nodes``) init must find.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from scalegate.cli import init_files
from tests.conftest import ROOT
from tests.repos import checkout_repo, git

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
    linked = where / "packages"
    linked.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(("scalegate", "__editable__")) and entry.suffix != ".pth":
            (linked / entry.name).symlink_to(entry)
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    [site] = venv.glob("lib/python*/site-packages")
    (site / "team-packages.pth").write_text(f"{linked}\n")
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "PYTHONHOME")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("SCALEGATE_")}
    env |= {"PATH": f"{venv / 'bin'}:{env['PATH']}", "PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0"}
    torch_probe = "import torch; print(torch.__file__, torch.__version__)"
    before = _bash(f"python -c '{torch_probe}'", where, env)
    assert before.returncode == 0, _said(before)
    source = where / "scalegate"
    commit = checkout_repo(source)  # this checkout's files, uncommitted changes too, as a repository of one commit
    install = init_files.INSTALL.format(requirement=f"scalegate @ git+file://localhost{source}@{commit}")
    done = _bash(install, where, env)
    assert done.returncode == 0, _said(done)
    installed = re.findall(r"^Successfully installed (.+)$", done.stdout, flags=re.M)
    assert len(installed) == 1 and re.fullmatch(r"scalegate-\S+", installed[0]), f"pip installed {installed}"
    after = _bash(f"python -c '{torch_probe}'", where, env)
    assert after.stdout == before.stdout, f"torch was {before.stdout} and is {after.stdout} after the install"
    found = _bash("python -c 'import scalegate; print(scalegate.__file__)'", where, env)
    assert found.stdout.startswith(str(site / "scalegate")), f"scalegate from {found.stdout}, not the install"
    return TeamEnv(python=venv / "bin" / "python", env=env, install=install)


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
    ran = [team_env.install]
    assert team_env.install in templates["github"] and team_env.install in templates["gitlab"]

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
    done = _bash(gate, repo, team_env.env | {"SCALEGATE_BASE": "HEAD", "SCALEGATE_GATE_ARGS": GATE_BOUNDS}, 900)
    assert done.returncode == 0, _said(done)
    ran.append(gate)
    verdicts = {c["case_id"]: c["status"] for c in json.loads((repo / "scalegate-gate.json").read_text())["cases"]}
    assert set(verdicts) == {case_id} and verdicts[case_id] in ("ok", "noisy"), verdicts
    assert "PR gate (A/B)" in (repo / "scalegate-gate.md").read_text()  # the PR comment's body

    for template, commands in templates.items():
        assert commands and set(commands) <= set(ran), f"{template} runs {set(commands) - set(ran)}, untested"


def test_the_readme_and_the_guide_install_with_the_command_this_walk_runs():
    """The walk installs with init_files.INSTALL and a git URL: the README and the guide show that command."""
    shown = init_files.INSTALL.format(requirement="scalegate @ git+").rstrip('"')
    for page in (ROOT / "README.md", ROOT / "docs" / "gate-your-repository.md"):
        text = page.read_text()
        assert shown in text and "python -m scalegate init" in text, f"{page.name} shows another install"


@pytest.mark.slow
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
