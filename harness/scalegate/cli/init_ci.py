"""The CI files ``scalegate init`` writes: a GitHub workflow, a GitLab job, the SLURM batch scripts of the PR gate and
the nightly, and the login node's submit script.

Every template runs the same few commands, defined once here (``COMMANDS``) and put in place of their ``@NAME@``
tokens, so the files cannot drift apart and a test can run exactly them (tests/test_adopt.py). A token alone on its
line takes that line's indentation for each of its lines, and the line goes where its value is empty. The GitHub
and GitLab jobs come in two kinds: on a GPU machine of their own, the gate runs in the job; where the team named a
SLURM cluster (init_cluster.py), the job runs on a login node and submits the PR gate's batch script.
"""

from __future__ import annotations

import importlib.resources
import json
import re
from dataclasses import dataclass

from scalegate import policy
from scalegate.cli.init_cluster import Cluster

COMMANDS = {
    "GATE": 'python -m scalegate gate --base "$SCALEGATE_BASE" --results-dir "$SCALEGATE_RESULTS" '
    "--markdown scalegate-gate.md --json scalegate-gate.json $SCALEGATE_GATE_ARGS",
    "NIGHTLY": 'python -m pytest -p no:cacheprovider --scaling-results-dir="$SCALEGATE_RESULTS" $SCALEGATE_PYTEST_ARGS',
    "REPORT": 'python -m scalegate report "$SCALEGATE_RESULTS/latest" --out "$SCALEGATE_RESULTS/report"',
    "HISTORY_ADD": 'python -m scalegate history add "$SCALEGATE_RESULTS/latest" --db "$SCALEGATE_HISTORY_DB"',
    "HISTORY_CHECK": 'python -m scalegate history check --db "$SCALEGATE_HISTORY_DB"',
}
INSTALL = 'python -m pip install "{requirement}"'
SUBMIT = "bash ci/scalegate-submit.sh"
# kind (init --ci) -> its files: (template, where it goes, what it is)
CI = {
    "github": [("github-scalegate.yml", ".github/workflows/scalegate.yml", "the PR gate on GitHub Actions")],
    "gitlab": [("gitlab-scalegate.yml", "ci/scalegate.gitlab-ci.yml", "the merge-request gate (include it)")],
    "slurm": [
        ("scalegate-pr.sbatch", "ci/scalegate-pr.sbatch", "the PR gate as a SLURM job"),
        ("scalegate-nightly.sbatch", "ci/scalegate-nightly.sbatch", "the nightly as a SLURM job"),
        ("scalegate-submit.sh", "ci/scalegate-submit.sh", "the PR gate from a login node: sbatch --wait"),
    ],
}
GATE_SHARE = 0.75  # --max-minutes, of the time the gate has: the rest for setup and a round still running
QUEUE_MINUTES = 60  # a login node's CI job waits this long in SLURM's queue beyond the job's own time limit
RUNNER_MINUTES = 60  # the CI job of a GPU runner of its own


@dataclass(frozen=True, kw_only=True)
class Rendering:
    install: str  # the requirement the templates pip install
    cluster: Cluster
    paths: tuple[str, ...]  # the changes that run the gate
    step_s: float | None = None  # the script's step in init's short run, where its loss lines timed it

    @property
    def login(self) -> bool:
        """The CI jobs run on a SLURM login node and submit the PR gate's batch script."""
        return self.cluster.declared

    def gate_args(self) -> str:
        minutes = self.cluster.minutes() if self.login else RUNNER_MINUTES
        return f"--scaling-steps {policy.SCRIPT_GATE_STEPS} --max-minutes {max(1, int(minutes * GATE_SHARE))}"

    def tokens(self) -> dict[str, str]:
        c = self.cluster
        shape = f"{c.nodes} node(s) x {c.gpus_per_node} GPU(s)" if c.gpus_per_node else f"{c.nodes} node(s), no GPU"
        env = (
            "The job activates the training environment with the setup line below; scalegate is installed into it by"
            if c.setup
            else "The job runs in the environment it is submitted from (sbatch exports it): your training environment, "
            "torch included,\n# with scalegate installed into it by"
        )
        return {
            **COMMANDS,
            "INSTALL": INSTALL.format(requirement=self.install),
            "SETUP": c.setup,
            "SHAPE": f"on {shape}",
            "ENV_SAYS": env,
            "RESULTS": c.results_dir,
            "STEPS_SAYS": _steps_says(self.step_s),
            "GATE_ARGS": self.gate_args(),
            "PATHS": "\n".join(f"- {json.dumps(p)}" for p in self.paths),
            **(_login(c) if self.login else _runner()),
        }


def _steps_says(step_s: float | None) -> str:
    said = (
        f"--scaling-steps {policy.SCRIPT_GATE_STEPS}: the measured steps a launch that the detection figures of a team's "
        "script were taken at\n# (scalegate's docs/detection.md); fewer make a gate cheaper and its verdicts less sure."
    )
    if step_s:
        window = policy.SCRIPT_GATE_STEPS * step_s
        said += f" This script's steps took\n# {step_s * 1e3:.1f} ms in init's short run: about {window:.0f} s measured a launch."
    return said


def _runner() -> dict[str, str]:
    about = (
        "# The runner: a GPU machine registered with the labels below, where `python` is your training environment,\n"
        "# torch included (its bin/ first on the runner's PATH, or activated in a step of your own before these), with\n"
        "# git and, for GitHub, the GitHub CLI (gh). scalegate is installed into that environment: your torch stays."
    )
    return {
        "ABOUT": about,
        "RUNS_ON": "[self-hosted, gpu]",
        "TAG": "gpu",
        "CI_MINUTES": str(RUNNER_MINUTES),
        "GATE_STEP": "The gate, the PR against its base",
        "GATE_RUN": COMMANDS["GATE"],
        "RESULTS_VAR": "SCALEGATE_RESULTS: results/gate",
        "ARTIFACTS": "results/gate/",
        "AFTER": "",
    }


def _login(c: Cluster) -> dict[str, str]:
    about = (
        "# The runner: on a SLURM login node, registered with the labels below, with sbatch, scancel and scontrol, git\n"
        "# and, for GitHub, the GitHub CLI (gh); its work directory on the filesystem the compute nodes share (the job\n"
        "# runs in the checkout). The job submits ci/scalegate-pr.sbatch with `sbatch --wait` (ci/scalegate-submit.sh):\n"
        f"# its time limit is {c.time} and the CI job's {c.minutes() + QUEUE_MINUTES} minutes leave {QUEUE_MINUTES} for "
        "the queue. A cancelled or timed-out\n# CI job cancels its SLURM job; the comment says when SLURM refused the "
        "job or it ran out of its time."
    )
    after = (
        "- |\n"
        "  # a CI job cancelled or timed out takes its SLURM job with it (ci/scalegate-submit.sh's trap does too)\n"
        "  job=$(head -n 1 scalegate-job 2>/dev/null); job=${job%%;*}\n"
        '  if [ -n "$job" ] && squeue -h -j "$job" 2>/dev/null | grep -q .; then scancel "$job"; fi'
    )
    return {
        "ABOUT": about,
        "RUNS_ON": "[self-hosted, slurm]",
        "TAG": "slurm",
        "CI_MINUTES": str(c.minutes() + QUEUE_MINUTES),
        "GATE_STEP": "Submit ci/scalegate-pr.sbatch, wait for the gate",
        "GATE_RUN": SUBMIT,
        "RESULTS_VAR": "",
        "ARTIFACTS": "scalegate-pr-*.out",
        "AFTER": after,
    }


def render(template: str, tokens: dict[str, str]) -> str:
    """``@NAME@`` replaced: alone on its line, each of the value's lines indented as the token was (the line dropped
    where the value is empty); within a line, in place."""
    out = []
    for line in template.splitlines():
        alone = re.fullmatch(r"(\s*)@([A-Z_]+)@", line)
        if alone and alone.group(2) in tokens:
            value = tokens[alone.group(2)]
            out += [alone.group(1) + v if v else v for v in value.splitlines()]
            continue
        out.append(re.sub(r"@([A-Z_]+)@", lambda m: tokens.get(m.group(1), m.group(0)), line))
    return "\n".join(out) + "\n"


def files(kinds: list[str], rendering: Rendering) -> list[tuple[str, str, str]]:
    """(path, text, what it is) of each CI kind's files, the SLURM ones too where the jobs submit them."""
    if rendering.login and {"github", "gitlab"} & set(kinds) and "slurm" not in kinds:
        kinds = [*kinds, "slurm"]
    tokens = rendering.tokens()
    out = []
    for kind in kinds:
        for template, path, says in CI[kind]:
            text = (importlib.resources.files("scalegate.cli") / "templates" / template).read_text()
            sbatch = rendering.cluster.sbatch_lines(
                "scalegate-nightly" if "nightly" in template else "scalegate-pr",
                rendering.cluster.nightly_time if "nightly" in template else rendering.cluster.time,
            )
            out.append((path, render(text, {**tokens, "SBATCH": sbatch}), says))
    return out
