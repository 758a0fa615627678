"""``python -m scalegate init``: gate a team's training script from the team's own repository.

    python -m scalegate init                                   # the one training script found here
    python -m scalegate init --script train.py --strategies ddp,fsdp --topologies 1x2,1x8
    python -m scalegate init --script hf_train.py --loss-pattern "'loss': '?([0-9.eE+-]+)'?" --ci github
    python -m scalegate init --script train.py --nodes 2 --gpus-per-node 8 --partition gpu --account ml-infra
    python -m scalegate init --script train.py --profile site.toml   # the cluster's [cluster] table

It reads the script's flags (its steps, strategy, devices, nodes, batch: harness/scalegate/cli/init_script.py), runs
it once for a few steps under torchrun and times its steps from its loss lines, checks the loss pattern against
what that run printed, then writes scaling_tests/test_<name>.py (a scaling_script marker passing {steps} and
{strategy}), pytest.ini, and CI files that install this scalegate into the job's environment and gate with
--scaling-steps 300, the measured steps a team's script's detection figures were taken at: a GitHub workflow and a
GitLab job (on a GPU runner of their own, or, where a SLURM cluster is named, on a login node that submits the PR
gate's batch script with sbatch --wait), SLURM batch scripts for the PR gate and the nightly that ask for the
cluster's nodes and GPUs. It overwrites no file without --force, and says what it wrote and what to run next.
Exit 0: written; 2: bad input (nothing written).
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from scalegate.cli import init_ci, init_cluster, init_files
from scalegate.contract.errors import ScalegateError
from scalegate.gate.project import Project

CI_KINDS = tuple(init_ci.CI)


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
    p.add_argument(
        "--topologies",
        type=_words,
        metavar="NxG,...",
        help="the cases' topologies (default: --nodes x --gpus-per-node where a cluster is named, else 1x2)",
    )
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
        help="what the CI files pip install (default: this scalegate, from where it came: its wheel's file, "
        "git+URL@commit)",
    )
    p.add_argument("--probe-steps", type=int, default=10, metavar="N", help="the short run's steps (default: 10)")
    p.add_argument("--probe-timeout", type=float, default=600, metavar="S", help="its limit in s (default: 600)")
    p.add_argument("--force", action="store_true", help="overwrite the files init writes where they exist")
    init_cluster.add_options(p)
    p.set_defaults(handler=lambda args, extra: run(args))


def run(args: argparse.Namespace) -> int:
    # init's parts plan cases (plan/script.py: the workloads, so torch): imported when init runs, not for its parser,
    # so that no other command starts by importing torch (~1.2 s a command)
    from scalegate.cli import init_marker, init_paths, init_probe, init_script, init_summary

    project = Project.find()
    root = project.root
    if project.own:
        raise ScalegateError(
            f"{root} is scalegate's own repository: init writes a team's scaling cases into the team's repository",
            "run it in the repository that holds your training script",
        )
    given = init_cluster.given(args)
    topologies = args.topologies or given.topologies() or ["1x2"]
    cluster = given.resolved(topologies)
    found = init_script.read_flags(init_script.find_script(root, args.script))
    marker = init_marker.plan(
        root,
        found,
        name=args.name,
        strategies=args.strategies,
        topologies=topologies,
        batch=args.batch,
        steps_flag=args.steps_flag,
    )
    install, far = (args.install, "") if args.install else init_files.installed_requirement()
    config, note = init_files.pytest_config(root)
    workflow = ".github/workflows/scalegate.yml" if "github" in args.ci else "ci/scalegate.gitlab-ci.yml"
    paths = init_paths.trigger_paths(root, found.path, workflow)
    planned = init_ci.Rendering(install=install, cluster=cluster, paths=tuple(paths))
    names = [path for path, _, _ in init_ci.files(args.ci, planned)]
    init_files.refuse_existing(root, [marker.test_path, *([config.path] if config else []), *names], args.force)
    probe = init_probe.run(root, marker, args.probe_steps, args.probe_timeout)
    pattern, read = init_probe.loss_pattern(args.loss_pattern, probe, marker.script)
    marker = marker.with_pattern(pattern)
    init_marker.validated(marker, root)
    step_s = init_probe.step_seconds(pattern, probe)  # the gate's window in seconds, said to the team
    rendering = replace(planned, step_s=step_s)
    outputs = [init_files.Output(path=p, text=t, says=w) for p, t, w in init_ci.files(args.ci, rendering)]
    outputs = ([config] if config else []) + outputs
    cases = [f"{s}-{marker.name}-{t}" for s in marker.strategies for t in marker.topologies]
    refs = ", ".join(f"{s}-{marker.name}-1x1" for s in marker.strategies)
    says = f"the cases {', '.join(cases)} (efficiency against {refs})"
    test = init_files.Output(path=marker.test_path, text=init_marker.test_file(marker), says=says)
    init_files.write(root, [test, *outputs])
    init_summary.show(found, marker, read, [test, *outputs], rendering, [n for n in (note, far) if n])
    return 0
