"""``python -m scalegate init``: gate a team's training script from the team's own repository.

    python -m scalegate init                                   # the one training script found here
    python -m scalegate init --script train.py --strategies ddp,fsdp --topologies 1x2,1x8
    python -m scalegate init --script hf_train.py --loss-pattern "'loss': '?([0-9.eE+-]+)'?" --ci github

It reads the script's flags (its steps, strategy, devices, nodes, batch: harness/scalegate/cli/init_script.py), runs
it once for a few steps under torchrun, checks the loss pattern against what that run printed, then writes
scaling_tests/test_<name>.py (a scaling_script marker passing {steps} and {strategy}), pytest.ini, and CI templates
that install this scalegate into the job's environment: a GitHub Actions workflow for a self-hosted GPU runner, a
GitLab CI job, SLURM batch scripts for the PR gate and the nightly. It overwrites no file without --force, and says
what it wrote and what to run next. Exit 0: written; 2: bad input (nothing written).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from scalegate.cli import init_files
from scalegate.contract.errors import ScalegateError
from scalegate.gate.project import Project

if TYPE_CHECKING:
    from scalegate.cli import init_marker, init_script

CI_KINDS = tuple(init_files.CI)


def _words(text: str) -> list[str]:
    words = [w.strip() for w in text.split(",") if w.strip()]
    if not words:
        raise argparse.ArgumentTypeError(f"{text!r} names nothing: give comma-separated words, e.g. ddp,fsdp")
    return words


def _kinds(text: str) -> list[str]:
    kinds = _words(text)
    if kinds == ["none"]:
        return []
    unknown = [k for k in kinds if k not in CI_KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(f"{unknown[0]!r} is not a CI kind: name {', '.join(CI_KINDS)}, or none")
    return kinds


def add_parser(sub) -> None:
    p = sub.add_parser(
        "init",
        help="gate your training script from your repository: its scaling cases, pytest.ini, CI templates",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--script", metavar="PATH", help="the training script (default: the one file here that trains)")
    p.add_argument("--name", help="the cases' name, ids <strategy>-<name>-<topology> (default: the script's stem)")
    p.add_argument(
        "--strategies",
        type=_words,
        metavar="WORDS",
        help="the script's own strategy words, comma-separated (default: ddp, else its strategy flag's first choice)",
    )
    p.add_argument("--topologies", type=_words, default=["1x2"], metavar="NxG,...", help="default: 1x2")
    p.add_argument(
        "--loss-pattern",
        metavar="REGEX",
        help="the regex that reads the loss from rank 0's lines: one group (the loss) or two (the step, the loss) "
        "(default: the first common stack's pattern that matches the short run)",
    )
    p.add_argument(
        "--steps-flag", metavar="FLAG", help="the script's flag for its steps (default: found, --max-steps...)"
    )
    p.add_argument(
        "--batch",
        type=int,
        metavar="N",
        help="samples per rank per optimizer step (default: the script's batch flag's default, times its "
        "accumulation's; without either, throughput is in optimizer steps/s)",
    )
    p.add_argument(
        "--ci",
        type=_kinds,
        default=list(CI_KINDS),
        metavar="KINDS",
        help="github, gitlab, slurm, or none (default: all)",
    )
    p.add_argument(
        "--install",
        metavar="REQUIREMENT",
        help="what the CI templates pip install (default: this scalegate, from where it came: git+URL@commit)",
    )
    p.add_argument("--probe-steps", type=int, default=10, metavar="N", help="the short run's steps (default: 10)")
    p.add_argument("--probe-timeout", type=float, default=600, metavar="S", help="its limit in s (default: 600)")
    p.add_argument("--force", action="store_true", help="overwrite the files init writes where they exist")
    p.set_defaults(handler=lambda args, extra: run(args))


def run(args: argparse.Namespace) -> int:
    # init's parts plan cases (plan/script.py: the workloads, so torch): imported when init runs, not for its parser,
    # so that no other command starts by importing torch (~1.2 s a command)
    from scalegate.cli import init_marker, init_probe, init_script

    project = Project.find()
    root = project.root
    if project.own:
        raise ScalegateError(
            f"{root} is scalegate's own repository: init writes a team's scaling cases into the team's repository",
            "run it in the repository that holds your training script",
        )
    found = init_script.read_flags(init_script.find_script(root, args.script))
    marker = init_marker.plan(
        root,
        found,
        name=args.name,
        strategies=args.strategies,
        topologies=args.topologies,
        batch=args.batch,
        steps_flag=args.steps_flag,
    )
    install, far = (args.install, "") if args.install else init_files.installed_requirement()
    config, note = init_files.pytest_config(root)
    outputs = ([config] if config else []) + init_files.ci_files(args.ci, install)
    init_files.refuse_existing(root, [marker.test_path, *(o.path for o in outputs)], args.force)
    probe = init_probe.run(root, marker, args.probe_steps, args.probe_timeout)
    pattern, read = init_probe.loss_pattern(args.loss_pattern, probe, marker.script)
    marker = marker.with_pattern(pattern)
    init_marker.validated(marker, root)
    cases = [f"{s}-{marker.name}-{t}" for s in marker.strategies for t in marker.topologies]
    refs = ", ".join(f"{s}-{marker.name}-1x1" for s in marker.strategies)
    says = f"the cases {', '.join(cases)} (efficiency against {refs})"
    test = init_files.Output(path=marker.test_path, text=init_marker.test_file(marker), says=says)
    init_files.write(root, [test, *outputs])
    _summary(found, marker, read, [test, *outputs], install, [n for n in (note, far) if n])
    return 0


def _summary(
    found: init_script.ScriptFlags,
    marker: init_marker.Marker,
    read: list[str],
    written: list[init_files.Output],
    install: str,
    notes: list[str],
) -> None:
    """What init read, what it wrote, and the commands to run next."""
    from scalegate.cli import init_marker

    print(f"init: {marker.script}'s flags, from {found.source}: {', '.join(marker.argv)}")
    pattern = init_marker.pattern_literal(marker.loss_pattern)
    print(f"init: the loss, read by {pattern} from {len(read)} lines of the run, e.g. {read[0].strip()!r}")
    print("init: wrote")
    width = max(len(o.path) for o in written) + 2
    for output in written:
        print(f"  {output.path.ljust(width)}{output.says}")
    if len(written) > 1:
        print(f"init: the CI templates install scalegate with: {init_files.INSTALL.format(requirement=install)}")
    for note in notes:
        print(f"init: NOTE: {note}")
    tops = dict.fromkeys(shlex.quote(Path(o.path).parts[0]) for o in written)  # scaling_tests, .github, ci
    print("next:")
    print("  pytest                                       # every case and its 1x1 reference, then the table")
    print(f"  git add {' '.join(tops)} && git commit -m 'Gate scaling with scalegate'")
    print("  python -m scalegate gate --base origin/main  # in a branch: the PR gate, head against base")
    print("  # what runs write, to leave out of git (.gitignore): results/ scalegate-gate.md scalegate-gate.json")
    if any(o.path.endswith(".gitlab-ci.yml") for o in written):
        print("  # GitLab: add to .gitlab-ci.yml:  include: [{local: ci/scalegate.gitlab-ci.yml}]")
