"""``python -m scalegate bisect --package NAME GOOD BAD -k CASE``: the first release of a package that made a case regress.

    python -m scalegate bisect --package deepspeed 0.18.4 0.19.8 -k "deepspeed-zero2-cnn-1x2"

The releases between GOOD and BAD (``pip index versions NAME``, final releases only, in order) are searched by
halving, as ``git bisect`` halves commits. Each probed release gets a venv of its own that sees the head's
packages with that release installed over them (``environments.overlay``: built once under ``--envs``, reused by
later runs); the predicate is the A/B gate as in a commit bisect: the probed release's environment against GOOD's,
both launched in every round (``gate --base-python``), regressed = bad, ok = good, anything else (undecided within
the budget, a crash, a release that fails to install) skipped. Skipped releases never point the search the wrong
way: where they leave more than one candidate, the result names the range.

Exit codes: 0 a first bad release was found (printed), 1 none (BAD is not bad, or skips left a range), 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from packaging.version import InvalidVersion, Version

from scalegate.cli import bisect, forward
from scalegate.contract import checkout
from scalegate.contract.errors import ScalegateError
from scalegate.gate import environments


def releases(package: str) -> list[str]:
    """The registry's final releases of ``package``, oldest first."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    found = re.search(r"^Available versions: (.+)$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or not found:
        raise ScalegateError(
            f"--package {package}: the package index lists no releases of it", "check the name and that pip reaches it"
        )
    parsed = []
    for text in found.group(1).split(","):
        try:
            version = Version(text.strip())
        except InvalidVersion:
            continue
        if not version.is_prerelease and not version.is_devrelease:
            parsed.append(version)
    return [str(v) for v in sorted(parsed)]


def between(available: list[str], good: str, bad: str, package: str) -> list[str]:
    """GOOD, the releases after it, and BAD, in order; bad input when either is not a release or BAD is older."""
    for which, version in (("GOOD", good), ("BAD", bad)):
        if version not in available:
            near = ", ".join(available[-6:])
            raise ScalegateError(
                f"{which} {version} is not a release of {package}", f"pick one the index lists (newest: {near})"
            )
    if Version(good) >= Version(bad):
        raise ScalegateError(f"GOOD {good} is not older than BAD {bad}", "pass the older, good release first")
    return [v for v in available if Version(good) <= Version(v) <= Version(bad)]


def search(versions: list[str], probe: Callable[[str], int]) -> tuple[int, int, list[str]]:
    """Halve ``versions`` (first good, last bad) with ``probe`` (GOOD, BAD or SKIP): (index of the last good,
    index of the first bad, the skipped releases); adjacent indices once decided, else the undecided range."""
    lo, hi, skipped = 0, len(versions) - 1, []
    untried = set(range(1, len(versions) - 1))
    while True:
        inside = sorted(i for i in untried if lo < i < hi)
        if not inside:
            return lo, hi, skipped
        mid = min(inside, key=lambda i: abs(i - (lo + hi) / 2))
        untried.discard(mid)
        code = probe(versions[mid])
        if code == bisect.GOOD:
            lo = mid
        elif code == bisect.BAD:
            hi = mid
        else:
            skipped.append(versions[mid])


def run(args: argparse.Namespace, extra: list[str]) -> int:
    """``bisect``'s command: releases of ``--package``, else commits (cli/bisect.py)."""
    if not args.package:
        return bisect.main(args, extra)
    user_args = bisect.selection(forward.passed_on(args, extra))
    return main(args.package, args.good, args.bad, user_args, Path(args.results_dir), Path(args.envs))


def main(package: str, good: str, bad: str, user_args: list[str], results_dir: Path, envs: Path) -> int:
    versions = between(releases(package), good, bad, package)
    out = (results_dir / time.strftime("bisect-%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    good_python = environments.overlay(package, good, envs)
    print(
        f"bisect: {package} {good} good, {bad} bad; {len(versions) - 2} releases between; each step is the A/B gate "
        f"against {good}'s environment",
        flush=True,
    )

    def probe(version: str) -> int:
        try:
            python = environments.overlay(package, version, envs)
        except ScalegateError as exc:
            print(f"bisect: {package} {version} is skipped: it does not install ({exc.message.splitlines()[0]})")
            return bisect.SKIP
        return _step(package, version, python, good_python, out, user_args)

    if probe(bad) != bisect.BAD:
        print(f"bisect: {package} {bad} is not bad against {good}: nothing to bisect")
        return 1
    lo, hi, skipped = search(versions, probe)
    if hi - lo == 1:
        print(f"bisect: first bad release: {package} {versions[hi]} (last good: {versions[lo]})")
        return 0
    print(
        f"bisect: the first bad release is one of {package} {', '.join(versions[lo + 1 : hi + 1])} "
        f"(skipped: {', '.join(skipped)}); last good: {versions[lo]}"
    )
    return 1


def _step(package: str, version: str, python: str, good_python: str, out: Path, user_args: list[str]) -> int:
    """The gate, run by ``python`` (the probed release's venv) with GOOD's venv on the base side."""
    report = out / f"step-{package}-{version}.json"
    cmd = [python, "-m", "scalegate", "gate", "--base-python", good_python, "--results-dir", str(out / "gate")]
    cmd += ["--json", str(report), *user_args]
    env = checkout.environment({k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"})
    return bisect.judged(f"{package} {version}", subprocess.run(cmd, env=env).returncode, report)
