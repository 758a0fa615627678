"""What ``scalegate init`` says when it has written its files: what it read of the script, what the gate will
measure and the jobs ask for, every file, and the commands to run next."""

from __future__ import annotations

import shlex
from pathlib import Path

from scalegate import policy
from scalegate.cli import init_ci, init_files, init_marker, init_script


def show(
    found: init_script.ScriptFlags,
    marker: init_marker.Marker,
    read: list[str],
    written: list[init_files.Output],
    rendering: init_ci.Rendering,
    notes: list[str],
) -> None:
    """What init read, what it wrote, and the commands to run next."""
    print(f"init: {marker.script}'s flags, from {found.source}: {', '.join(marker.argv)}")
    pattern = init_marker.pattern_literal(marker.loss_pattern)
    print(f"init: the loss, read by {pattern} from {len(read)} lines of the run, e.g. {read[0].strip()!r}")
    steps = policy.SCRIPT_GATE_STEPS
    if rendering.step_s:
        window = f"{rendering.step_s * 1e3:.1f} ms a step in the short run: about {steps * rendering.step_s:.0f} s"
        print(f"init: the gate measures {steps} steps a launch (--scaling-steps {steps}); {window} a launch")
    else:
        print(f"init: the gate measures {steps} steps a launch (--scaling-steps {steps}); the short run's loss lines "
              "were too few to time a step")  # fmt: skip
    c = rendering.cluster
    shape = (
        f"{c.nodes} node(s) x {c.gpus_per_node} GPU(s) ({c.gpu_request()})"
        if c.gpus_per_node
        else f"{c.nodes} node(s), no GPU"
    )
    asked = [shape] + [f"{k} {v}" for k, v in (("partition", c.partition), ("account", c.account)) if v]
    print(
        f"init: the SLURM jobs ask {', '.join(asked)}, {c.time} (the nightly {c.nightly_time}); results in {c.results_dir.rstrip('/')}/"
    )
    print("init: wrote")
    width = max(len(o.path) for o in written) + 2
    for output in written:
        print(f"  {output.path.ljust(width)}{output.says}")
    if len(written) > 1:
        print(f"init: the CI files install scalegate with: {init_ci.INSTALL.format(requirement=rendering.install)}")
    for note in notes:
        print(f"init: NOTE: {note}")
    tops = dict.fromkeys(shlex.quote(Path(o.path).parts[0]) for o in written)  # scaling_tests, .github, ci
    print("next:")
    if rendering.login:
        print("  sbatch --wait ci/scalegate-nightly.sbatch      # every case and its 1x1 reference, on the cluster")
    else:
        print("  pytest                                       # every case and its 1x1 reference, then the table")
    print(f"  git add {' '.join(tops)} && git commit -m 'Gate scaling with scalegate'")
    if rendering.login:
        print("  SCALEGATE_BASE=$(git merge-base HEAD origin/main) bash ci/scalegate-submit.sh   # in a branch, on a "
              "login node: the PR gate as CI runs it")  # fmt: skip
    else:
        print(
            f"  python -m scalegate gate --base origin/main --scaling-steps {steps}  # in a branch: head against base"
        )
    print("  # what runs write, to leave out of git (.gitignore): results/ scalegate-*")
    if any(o.path.endswith(".gitlab-ci.yml") for o in written):
        print("  # GitLab: add to .gitlab-ci.yml:  include: [{local: ci/scalegate.gitlab-ci.yml}]")
