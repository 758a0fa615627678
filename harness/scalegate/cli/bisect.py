"""``python -m scalegate bisect GOOD BAD -k CASE [pytest args]``: the first commit that made a case regress.

    python -m scalegate bisect v1.2 HEAD -k "ddp-cnn-1x2"
    python -m scalegate bisect origin/main~20 origin/main -k "fsdp and 1x2" --scaling-max-launches 6

``git bisect run`` in a detached worktree of BAD (the user's working tree is never touched), with the A/B gate
as its predicate: at each commit it tested, the selected cases are measured against GOOD in the same run,
in alternating rounds, with the sequential A/B test (``harness/scalegate/judge/ab.py``), which launches again until it
is sure (the gate's budget). A commit where a selected case is ``regressed`` is bad; where every selected case
is ``ok`` it is good; anything else (undecided within the budget, a crashed case, no result) is skipped (exit 125),
so an unsure step can never point bisect the wrong way; a crash of the gate itself stops the bisect (exit 255),
naming the commit and the error. Parity is left out: it needs no base. The worktree and
the bisect state are removed whatever happens (Ctrl-C, a failing step); those of a bisect killed outright (SIGKILL)
are removed by the next bisect or gate in the repository on that host.

Exit codes: 0 a first bad commit was found (printed), 1 none (every candidate skipped, or BAD is not bad),
2 bad input.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from scalegate.cli import forward
from scalegate.contract import checkout
from scalegate.contract.errors import ScalegateError
from scalegate.gate import worktree
from scalegate.plan.option_types import output_dir

GOOD, BAD, SKIP, ABORT = 0, 1, 125, 255  # git bisect run's meanings (128 and above stop the bisect)


# The predicate git bisect runs at each commit: this scalegate's own step(), whatever the commit under test holds.
def step_code() -> str:
    entry = checkout.path_entry(checkout.own())  # None where scalegate is installed, not a checkout
    prefix = f"import sys; sys.path.insert(0, {str(entry)!r}); " if entry else "import sys; "
    return prefix + "from scalegate.cli import bisect; sys.exit(bisect.step(sys.argv[1:]))"


def selection(user_args: list[str]) -> list[str]:
    """The user's pytest args with parity left out of every ``-k`` (and a ``-k`` required)."""
    out, found = [], False
    for i, arg in enumerate(user_args):
        if i > 0 and user_args[i - 1] == "-k":
            out.append(f"({arg}) and not parity")
            found = True
        elif arg.startswith("-k") and len(arg) > 2:
            out.append(f"-k({arg[2:]}) and not parity")
            found = True
        else:
            out.append(arg)
    if not found:
        raise ScalegateError(
            "bisect needs the case to bisect: -k EXPR", 'e.g. python -m scalegate bisect GOOD BAD -k "ddp-cnn-1x2"'
        )
    return out


def verdict(data: dict[str, Any]) -> int:
    """The gate's JSON for one commit -> bad, good or skip."""
    statuses = [c.get("status") for c in data.get("cases", [])]
    if "regressed" in statuses:
        return BAD
    if statuses and all(s == "ok" for s in statuses):
        return GOOD
    return SKIP


def step(argv: list[str]) -> int:
    """One commit of ``git bisect run`` (cwd: the bisect worktree): the A/B gate against GOOD, as a bisect code."""
    from scalegate.cli import gate

    good, out, user_args = argv[0], Path(argv[1]), argv[2:]
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
    report = out / f"step-{commit}.json"
    args, extra = gate.namespace(user_args, base=good, results_dir=str(out / "gate"), json=str(report))
    try:
        code = gate.main(args, extra)
    except Exception as exc:  # our own crash is no verdict on the commit: git bisect run reads exit 1 as "bad"
        traceback.print_exc(file=sys.stdout)  # into bisect.log
        print(f"bisect: the gate crashed at {commit} ({type(exc).__name__}: {exc}): bisect stopped", flush=True)
        return ABORT
    return judged(commit, code, report)


def judged(what: str, code: int, report: Path) -> int:
    """A step's gate exit code and JSON -> bad, good or skip, printed with the cases' verdicts."""
    data = json.loads(report.read_text()) if code in (0, 1) and report.exists() else {}
    found = verdict(data) if data else SKIP
    cases = ", ".join(f"{c.get('key')} {c.get('status')}" for c in data.get("cases", [])) or f"gate exit {code}"
    print(f"bisect: {what} is {({GOOD: 'good', BAD: 'bad', SKIP: 'skipped'})[found]} ({cases})", flush=True)
    return found


def main(args: argparse.Namespace, extra: list[str]) -> int:
    user_args = forward.passed_on(args, extra)
    try:
        return _bisect(args.good, args.bad, selection(user_args), Path(args.results_dir))
    except ScalegateError as exc:
        print(f"error: {exc.message}" + (f"\nHINT: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return 2


def _bisect(good: str, bad: str, user_args: list[str], results_dir: Path) -> int:
    repo = worktree.toplevel(Path.cwd(), "bisect")
    good_commit, bad_commit = worktree.resolve(repo, good, "GOOD"), worktree.resolve(repo, bad, "BAD")
    if subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", good_commit, bad_commit]).returncode:
        raise ScalegateError(f"GOOD {good} is not an ancestor of BAD {bad}", "pass an older good commit first")
    out = (results_dir / time.strftime("bisect-%Y%m%d-%H%M%S")).resolve()
    for left in worktree.sweep(repo):
        print(f"bisect: removed {left}, a tree that a killed scalegate process left on this host", flush=True)
    with worktree.checkout(repo, bad_commit, out / "tree") as tree:
        git = lambda *a: subprocess.run(["git", *a], cwd=tree.path, capture_output=True, text=True)  # noqa: E731
        try:
            git("bisect", "start", bad_commit, good_commit)
            print(
                f"bisect: {good} ({good_commit[:12]}) good, {bad} ({bad_commit[:12]}) bad; each step is the A/B "
                f"gate against {good_commit[:12]}",
                flush=True,
            )
            done = subprocess.run(
                ["git", "bisect", "run", sys.executable, "-c", step_code(), good_commit, str(out), *user_args],
                cwd=tree.path,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            (out / "bisect.log").write_text(done.stdout)
        finally:
            git("bisect", "reset")
    first = re.search(r"^([0-9a-f]{40}) is the first bad commit", done.stdout, re.MULTILINE)
    for line in done.stdout.splitlines():
        if line.startswith("bisect: "):
            print(line)
    if not first:
        maybe = (
            re.findall(r"^([0-9a-f]{40})$", done.stdout.split("could be any of:", 1)[-1], re.MULTILINE)
            if "could be any of:" in done.stdout
            else []
        )
        for commit in maybe:  # skipped steps left a range: name it rather than guess
            print(f"bisect: could be {_subject(repo, commit)}")
        print(
            f"bisect: no single first bad commit found{' (undecided steps were skipped)' if maybe else ''}; "
            f"log: {out / 'bisect.log'}"
        )
        return 1
    print(f"bisect: first bad commit: {_subject(repo, first.group(1))}")
    return 0


def _subject(repo: Path, commit: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "log", "-1", "--format=%h %s", commit], capture_output=True, text=True
    ).stdout.strip()


def add_parser(sub) -> None:
    b = sub.add_parser(
        "bisect",
        help="the first commit between GOOD and BAD where the selected case regressed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    b.add_argument("good")
    b.add_argument("bad")
    b.add_argument(
        "--results-dir",
        default="results/bisect",
        type=output_dir("--results-dir"),
        help="where the steps' gate runs go (default: %(default)s)",
    )
    b.add_argument(
        "--package",
        metavar="NAME",
        help="bisect releases of this package instead of commits: GOOD and BAD are its versions, each probed "
        "release runs in a venv of its own",
    )
    b.add_argument(
        "--envs",
        default=".venv/envs",
        help="with --package: where each release's venv is built once and reused (default: %(default)s)",
    )
    forward.add(b)
    b.set_defaults(handler=main)
