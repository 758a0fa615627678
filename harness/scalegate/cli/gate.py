"""``python -m scalegate gate [pytest args]``: the pull-request gate in one command.

    python -m scalegate gate                                  # the canary cases, the shipped settings
    python -m scalegate gate -k "ddp and 1x2"                 # a selection (any pytest / --scaling-* argument)
    python -m scalegate gate --markdown gate.md --json gate.json

It runs, in the repository it is called from, that repository's scaling cases (harness/scalegate/cli/project.py: its
declared canaries when nothing is named; in scalegate's own repository DDP, FSDP and DeepSpeed ZeRO-2 on the cnn
workload, 1x2, their single-process reference, and the Fabric-vs-DDP parity case) with the shipped gate
settings (``SETTINGS``: a baseline is required; the drop to catch is 10%; the sequential test launches a
case again while it is undecided, up to 8 launches), then judges the run with ``scalegate.judge`` exactly as
``compare`` does and prints the markdown table. On one node the relaunches come in rounds, one launch per
undecided case per round, so a case's launches are spread over the gate (``harness/scalegate/cli/gate_rounds.py``: back-to-back
launches share a slow phase of the host); parity runs first in a session of its own. Arguments after the
gate's own options go to pytest and win over the defaults (``--scaling-models resnet`` replaces the canary
model). ``slurm/pr.sbatch`` and the workflows call this.

Exit codes: 0 no regression, 1 a regression or a failed case (correctness, parity, a crash), 2 bad input
or nothing to judge (a usage error, no case selected, no baseline file readable). What the gate promises,
in numbers, on the 2-core CPU VMs and on quiet GPU nodes: docs/gate.md and docs/detection.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from scalegate.cli import environments, gate_rounds, worktree
from scalegate.cli.project import Project
from scalegate.contract import atomic, checkout, duet
from scalegate.contract.errors import ScalegateError
from scalegate.launch.duet import Coordinator
from scalegate.plan import hostinfo
from scalegate.record import baselines, runfiles
from scalegate.report import compare
from scalegate.report import environments as env_report

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT = 0, 1, 2
# A baseline is required; the drop to catch is 10% whatever the baseline file says (the CPU profile records 25%
# so the 44-case CI matrix does not cry wolf, docs/gate.md); undecided cases launch again, up to 8 launches
# (docs/detection.md, sixth set: 6 left fsdp-cnn-1x2's 10% drop undecided 6% of the time, 8 left 1%).
SETTINGS = ["--scaling-require-baseline", "--scaling-tolerance", "0.1", "--scaling-max-launches", "8"]


# A/B (--base): no stored baseline is required (the base commit is measured), the same drop and budget in rounds.
AB_SETTINGS = ["--scaling-tolerance", "0.1", "--scaling-max-launches", "8"]
DUET_FILE = "duet.json"  # an A/B run's duet: used or why not, and each job's turns (launch/duet.py report)
NOTES_FILE = "gate-notes.json"  # what the gate itself did that the verdicts do not say (a time budget's stop)
MAX_LAUNCHES = int(SETTINGS[SETTINGS.index("--scaling-max-launches") + 1])


def pytest_argv(
    project: Project,
    user_args: list[str],
    results_dir: Path,
    tests: list[str],
    settings: list[str] = SETTINGS,
    python: str = sys.executable,
) -> list[str]:
    """A session's command in ``project``: its default selection and the settings first, the user's arguments last
    (argparse: the last one wins); ``python``: the side's interpreter (``--base-python``)."""
    return [
        python,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        *tests,
        *project.selection(user_args),
        *settings,
        f"--scaling-results-dir={results_dir}",  # one token: see ab_command
        *user_args,
    ]


def judge_run(
    run_dir: Path, baseline_dir: Path | None = None, base_dir: Path | None = None, project: Project | None = None
) -> tuple[int, str, dict]:
    """(exit code, markdown, json) for a finished run, through the one judge; ``base_dir``: the base commit's
    merged cases of an A/B run, which the run is judged against (the stored baseline then lends its spreads)."""
    cases = runfiles.load_run(run_dir)
    parity = compare.parity_rows(run_dir)
    if not cases and not parity:
        raise ScalegateError(f"{run_dir} holds no case results", "check the selection (-k, --scaling-*) selects cases")
    profile = (cases[0].get("profile") if cases else None) or "?"
    baseline = baselines.load(baseline_dir or (project or Project.find()).baselines, profile)
    if base_dir is None:
        rows = compare.compare(cases, baseline, require_baseline=True)
        title = f"PR gate: {run_dir.name} vs {baseline.path if baseline else 'no baseline for ' + profile}"
    else:
        rows = compare.compare(cases, baseline, base=runfiles.load_run(base_dir))
        title = f"PR gate (A/B): {run_dir.parent.name} against {compare.base_name(base_dir)}, measured in the same run"
    text = compare.markdown(rows, title) + compare.parity_markdown(parity)
    failed = any(r.failed() for r in rows) or any(p.get("problems") for p in parity)
    data = compare.to_json(rows, str(run_dir), baseline)
    data["parity"] = [
        {
            "case_id": p["case_id"],
            "problems": p.get("problems") or [],
            "status": p.get("status"),
            "ratio": p.get("ratio"),
            "launches": p.get("launches", 1),
        }
        for p in parity
    ]
    if base_dir is not None:
        data["base"] = compare.base_info(base_dir)
        base_env, head_env = env_report.read(base_dir), env_report.read(run_dir)
        text += env_report.markdown(base_env, head_env)
        data["environments"] = {"base": base_env, "head": head_env}
        if (run_dir / DUET_FILE).is_file():
            data["duet"] = json.loads((run_dir / DUET_FILE).read_text())
            text += _duet_markdown(data["duet"])
    if (run_dir / NOTES_FILE).is_file():
        data["notes"] = json.loads((run_dir / NOTES_FILE).read_text())
        text += "".join(f"\nNote: {note}.\n" for note in data["notes"])
    return (EXIT_REGRESSION if failed else EXIT_OK), text, data


def _duet_markdown(found: dict) -> str:
    """One line under the A/B table: whether base and head took turns step by step, and the jobs that ran alone."""
    if not found.get("duet"):
        return f"\nNo duet ({found.get('why_not')}): each round ran the base's session, then the head's.\n"
    alone = [
        f"{j['side']} {j['job']}: {j['solo'] or j['failed']}"
        for j in found["jobs"].values()
        if j["solo"] or j["failed"]
    ]
    paired = sum(1 for j in found["jobs"].values() if not j["solo"] and not j["failed"])
    line = f"\nDuet: base and head took turns step by step ({paired} jobs paired, docs/duet.md)."
    return line + ("" if not alone else " Not paired: " + "; ".join(alone) + ".") + "\n"


def _baseline_dir(user_args: list[str]) -> Path | None:
    for i, arg in enumerate(user_args):
        if arg == "--scaling-baseline-dir" and i + 1 < len(user_args):
            return Path(user_args[i + 1])
        if arg.startswith("--scaling-baseline-dir="):
            return Path(arg.split("=", 1)[1])
    return None


def main(args: argparse.Namespace, user_args: list[str]) -> int:
    results_dir = Path(args.results_dir)
    base_dir = None
    try:
        deadline = _deadline(getattr(args, "max_minutes", None))
        project = Project.find()
        if args.base or args.base_python:
            run_dir, base_dir, codes = _ab(
                project,
                args.base,
                user_args,
                results_dir,
                args.base_python,
                getattr(args, "no_duet", False),
                deadline,
            )
        elif gate_rounds.multi_node_slurm():  # every node's agent takes part in each launch: in-session relaunches
            if deadline is not None:  # its relaunches run inside one pytest session: no round to stop before
                raise ScalegateError(
                    "--max-minutes stops the gate between rounds; on a multi-node allocation its relaunches run "
                    "inside one pytest session, so it has no round to stop before",
                    "bound the job with sbatch --time instead, or run the gate in a one-node allocation (sbatch -N1)",
                )
            run_dir, codes = _in_session(project, user_args, results_dir)
            if run_dir is None:  # a node other than 0: node 0 judges and prints
                return EXIT_OK if codes == [0] else EXIT_REGRESSION
        else:
            run_dir, codes = _in_rounds(project, user_args, results_dir, deadline)
        code, text, data = judge_run(run_dir, _baseline_dir(user_args), base_dir, project)
    except ScalegateError as exc:
        print(f"error: {exc.message}" + (f"\nHINT: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return EXIT_BAD_INPUT
    print(text, end="")
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
    if 1 in codes and code == EXIT_OK:  # pytest failed something the table does not show
        return EXIT_REGRESSION
    return code


def _deadline(minutes: float | None) -> float | None:
    """``--max-minutes``: the ``time.monotonic()`` past which no round of the gate ends (gate_rounds.run)."""
    if minutes is None:
        return None
    if not minutes > 0:
        raise ScalegateError(
            f"--max-minutes {minutes:g}: the gate's time budget must be more than 0 minutes",
            "name the minutes a gate may take (e.g. --max-minutes 10), or leave the option out",
        )
    return time.monotonic() + 60 * minutes


def _in_session(project: Project, user_args: list[str], results_dir: Path) -> tuple[Path | None, list[int]]:
    """One pytest session on every node; its sequential relaunches follow each other (gaterounds' docstring)."""
    argv = pytest_argv(project, user_args, results_dir, [*project.tests, *project.parity])
    done = subprocess.run(argv, cwd=project.root, env=checkout.environment(dict(os.environ), project.root))
    if os.environ.get("SLURM_NODEID", "0") not in ("", "0"):
        return None, [done.returncode]
    return gate_rounds.check_run(done.returncode, results_dir, "the gate"), [done.returncode]


def _parity(project: Project, user_args: list[str], gate_dir: Path, tree: Path) -> tuple[Path | None, int]:
    """Parity in a session of its own (both front ends interleaved in each launch: no base needed), where the
    repository has a parity test."""
    if not project.parity:
        return None, 0
    done = subprocess.run(
        pytest_argv(project, user_args, gate_dir / "parity", project.parity),
        cwd=tree,
        env=checkout.environment(dict(os.environ), tree),
    )
    if done.returncode == 5:  # the selection has no parity case
        return None, 0
    if done.returncode == 0 and not (gate_dir / "parity" / "latest").exists():
        # every parity case skipped with its reason (one GPU: a 1x2 pair cannot run), so no case ever opened a run
        print("gate: parity: every parity case was skipped here (reasons above); the gate goes on without parity")
        return None, 0
    return gate_rounds.check_run(done.returncode, gate_dir / "parity", "the gate's parity session"), done.returncode


def _rounds(
    sides: list[gate_rounds.Side],
    user_args: list[str],
    gate_dir: Path,
    undecided,
    parity_run: Path | None,
    budget: int,
    coordinator: Coordinator | None = None,
    baseline_dir: Path | None = None,
    script_budget: int | None = None,
    deadline: float | None = None,
    notes: list[str] | None = None,
) -> tuple[dict[str, list[dict]], list[int]]:
    try:
        return gate_rounds.run(
            sides, user_args, gate_dir, undecided, budget, coordinator, baseline_dir, script_budget, deadline, notes
        )
    except ScalegateError as exc:
        if parity_run is None or "exit code 5" not in exc.message:
            raise
        return {side.name: [] for side in sides}, []  # the selection holds parity cases only


def _in_rounds(
    project: Project, user_args: list[str], results_dir: Path, deadline: float | None = None
) -> tuple[Path, list[int]]:
    """Parity, then the scaling cases in rounds against the stored baselines (harness/scalegate/cli/gate_rounds.py)."""
    gate_dir = results_dir / time.strftime("gate-%Y%m%d-%H%M%S")
    parity_run, parity_code = _parity(project, user_args, gate_dir, project.root)
    baseline_dir = _baseline_dir(user_args) or project.baselines

    def undecided(merged: dict[str, list[dict]]) -> list[str]:
        cases = merged["head"]
        baseline = baselines.load(baseline_dir, cases[0].get("profile", "?")) if cases else None
        return [f"[{c['case_id']}]" for c in cases if compare.outcome_of(c, baseline).next_launches]

    head = gate_rounds.Side(
        name="head", tree=project.root, argv=lambda extra, where: pytest_argv(project, extra, where, project.tests)
    )
    notes: list[str] = []
    budget = gate_rounds.budget_of([*SETTINGS, *user_args], MAX_LAUNCHES)
    merged, codes = _rounds([head], user_args, gate_dir, undecided, parity_run, budget, deadline=deadline, notes=notes)
    run_dir = gate_rounds.write_merged(gate_dir, merged["head"], parity_run, results_dir)
    _write_notes(run_dir, notes)
    return run_dir, [*codes, parity_code]


def _write_notes(run_dir: Path, notes: list[str]) -> None:
    if notes:
        atomic.write_json(run_dir / NOTES_FILE, notes)


def _duet_refused(base_tree: Path, no_duet: bool, base_python: str) -> str:
    """Why this A/B gate runs today's rounds instead of a duet (docs/duet.md), or "". The base side's ranks run the
    base commit's own harness where the base is scalegate itself, else the base environment's installed one."""
    if no_duet:
        return "--no-duet"
    if checkout.path_entry(base_tree) is not None:
        if not (base_tree / duet.CLIENT_FILE).is_file():
            return f"the base commit has no duet client ({duet.CLIENT_FILE}): an older base"
        protocol = base_tree / duet.PROTOCOL_FILE
        if duet.VERSION_LINE not in (protocol.read_text() if protocol.is_file() else ""):
            return f"the base commit's duet client is not version {duet.VERSION} ({duet.PROTOCOL_FILE}): an older base"
        return ""
    if base_python != sys.executable:
        probe = subprocess.run(
            [base_python, "-c", "from scalegate.contract import duet; print(duet.VERSION)"],
            capture_output=True,
            text=True,
        )
        if probe.returncode != 0 or probe.stdout.strip() != str(duet.VERSION):
            return f"the base environment's scalegate ({base_python}) has no duet client of version {duet.VERSION}"
    return ""


def ab_command(project: Project, python: str, empty: Path) -> Callable[[list[str], Path], list[str]]:
    """One side's session command in an A/B round (``python``: the side's interpreter). The sessions measure; the
    gate judges, base against head. A stored baseline in a session would judge its launches against another
    machine's level (and relaunch on its own): each session gets the ``empty`` baseline directory.

    Both directories lie in the head's repository (the gate's run directory), and pytest finds its configuration
    file from the common ancestor of the command line's arguments that are existing paths, an option's separate
    value included: given as ``--opt PATH`` they made the base session read the *head's* pytest.ini, and so run the
    head's test files and script (rootdir the head's), while importing the base's scalegate. ``--opt=PATH`` is one
    token, an option, which pytest does not take for a path: each side's session finds its own tree's
    configuration from its working directory."""

    def command(extra: list[str], where: Path) -> list[str]:
        return [
            *pytest_argv(project, [*AB_SETTINGS, *extra], where, project.tests, settings=[], python=python),
            f"--scaling-baseline-dir={empty}",
        ]

    return command


def _ab(
    project: Project,
    ref: str | None,
    user_args: list[str],
    results_dir: Path,
    base_python: str | None = None,
    no_duet: bool = False,
    deadline: float | None = None,
) -> tuple[Path, Path, list[int]]:
    """The working tree against ``ref`` (or against itself in another environment: ``base_python``), both launched
    in every round (harness/scalegate/judge/ab.py)."""
    if gate_rounds.multi_node_slurm():
        raise ScalegateError(
            "--base runs its rounds on one node; this allocation has several",
            "run the A/B gate in a one-node allocation (sbatch -N1), or drop --base on dedicated "
            "multi-node hardware, where the stored baselines hold (docs/gate.md)",
        )
    head_tree = project.root
    head_env = environments.head()
    base_env = environments.probe(base_python, "base") if base_python else head_env
    environments.check_same_device(base_env, head_env)
    gate_dir = (results_dir / time.strftime("gate-%Y%m%d-%H%M%S")).resolve()
    baseline_dir = _baseline_dir(user_args) or project.baselines
    empty = gate_dir / "no-baselines"

    def undecided(merged: dict[str, list[dict]]) -> list[str]:
        cases = merged["head"]
        stored = baselines.load(baseline_dir, cases[0].get("profile", "?")) if cases else None
        theirs = compare.base_records(cases, merged["base"])
        return [
            f"[{c['case_id']}]" for c in cases if compare.outcome_of(c, stored, base=theirs[c["key"]]).next_launches
        ]

    head_env = {**head_env, "scalegate": hostinfo.commit(head_tree)}  # the code each side imports
    with worktree.base_tree(head_tree, ref, gate_dir / "base-tree") as base:
        base_env = {**base_env, "scalegate": hostinfo.commit(base.path)}
        where = f" in {base_env['python']}" if base_python else ""
        print(f"gate: A/B, {head_tree} against {base.ref} ({base.commit[:12]}){where}, both launched in every round")
        refused = _duet_refused(base.path, no_duet, base_env["python"])
        parity_run, parity_code = _parity(project, user_args, gate_dir, head_tree)
        sides = [
            # the base side's ranks build DeepSpeed's ops into their own venv's cache (harness/scalegate/launch/base.py)
            gate_rounds.Side(
                name="base",
                tree=base.path,
                argv=ab_command(project, base_env["python"], empty),
                drop=("TORCH_EXTENSIONS_DIR",),
            ),
            gate_rounds.Side(name="head", tree=head_tree, argv=ab_command(project, sys.executable, empty)),
        ]
        print(
            f"gate: no duet ({refused}): each round runs the base's session, then the head's"
            if refused
            else "gate: duet: both commits' jobs of a case take turns step by step (docs/duet.md)",
            flush=True,
        )
        budget = gate_rounds.budget_of([*AB_SETTINGS, *user_args], MAX_LAUNCHES)
        notes: list[str] = []
        with contextlib.nullcontext() if refused else Coordinator() as coordinator:
            merged, codes = _rounds(
                sides,
                user_args,
                gate_dir,
                undecided,
                parity_run,
                budget,
                coordinator,
                baseline_dir,  # the stored peaks: whether a case's two jobs fit in GPU memory (launch/duet_fit.py)
                duet.script_rounds(budget, named=gate_rounds.budget_of(user_args, 0) > 0),
                deadline,
                notes,
            )
            if coordinator is not None:
                coordinator.settle()
            report = coordinator.report() if coordinator is not None else {}
            timeline = coordinator.timeline() if coordinator is not None else {}
    run_dir = gate_rounds.write_merged(
        gate_dir,
        merged["head"],
        parity_run,
        results_dir,
        base_cases=merged["base"],
        base={"ref": base.ref, "commit": base.commit},
    )
    atomic.write_json(run_dir / DUET_FILE, {"duet": not refused, "why_not": refused, "jobs": report, **timeline})
    atomic.write_json(run_dir / env_report.FILE, head_env)
    _write_notes(run_dir, notes)
    atomic.write_json(run_dir / "base" / env_report.FILE, base_env)
    return run_dir, run_dir / "base", [*codes, parity_code]


def add_parser(sub) -> None:
    g = sub.add_parser(
        "gate",
        help="the PR gate: run the canary cases with the shipped settings, judge, print the table",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g.add_argument(
        "--base",
        metavar="REF",
        help="A/B: also launch the canaries on this commit (e.g. origin/main) in every round, and judge "
        "the working tree against it instead of the stored baselines (docs/gate.md)",
    )
    g.add_argument(
        "--base-python",
        metavar="PATH",
        help="A/B across environments: the base side runs in this interpreter (another venv's bin/python), with "
        "--base REF or without it (the working tree on both sides): a dependency bump measured (docs/gate.md)",
    )
    g.add_argument(
        "--no-duet",
        action="store_true",
        help="A/B: run each round's two sessions one after the other, as before the duet (docs/duet.md)",
    )
    g.add_argument(
        "--max-minutes",
        type=float,
        metavar="M",
        help="a time budget for the gate: no round starts that would end past M minutes by the longest round so "
        "far; the cases still undecided are judged on the rounds they had (noisy), and the table says why "
        "(default: no time budget, the rounds' budget alone; docs/gate.md)",
    )
    g.add_argument("--results-dir", default="results/gate", help="where the gate's runs go (default: %(default)s)")
    g.add_argument("--markdown", help="also write the table to this file (a PR comment)")
    g.add_argument("--json", help="also write the verdicts as JSON to this file")
    g.set_defaults(func=None, gate=True)


def namespace(**given: object) -> argparse.Namespace:
    """The gate's arguments as its command line gives them: every option's default, then ``given``. For a caller
    that runs the gate itself (bisect's steps), so an option added here is never missing there."""
    sub = argparse.ArgumentParser().add_subparsers()
    add_parser(sub)
    args = sub.choices["gate"].parse_args([])
    vars(args).update(given)
    return args
