"""``bisect --package``: the first release of a package between GOOD and BAD where a case regressed.

Fast: the halving over releases with skips (a predicate over version strings: the search's own logic), the
releases between GOOD and BAD, and bad input. Nightly: the whole command over three DeepSpeed releases, each in a
venv of its own (harness/scalegate/cli/environments.py overlay), the A/B gate as its predicate.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scalegate.cli import bisect, bisect_package
from scalegate.contract.errors import ScalegateError

ROOT = Path(__file__).resolve().parents[1]
RELEASES = ["0.18.3", "0.18.4", "0.18.5", "0.18.6", "0.18.7", "0.18.8", "0.18.9", "0.19.0"]


def _probe(first_bad: str, skip: tuple[str, ...] = (), seen: list | None = None):
    def probe(version: str) -> int:
        if seen is not None:
            seen.append(version)
        if version in skip:
            return bisect.SKIP
        return bisect.BAD if RELEASES.index(version) >= RELEASES.index(first_bad) else bisect.GOOD

    return probe


@pytest.mark.parametrize("first_bad", RELEASES[1:])
def test_halving_finds_the_first_bad_release_in_log2_steps(first_bad):
    seen: list[str] = []
    lo, hi, skipped = bisect_package.search(RELEASES, _probe(first_bad, seen=seen))
    assert RELEASES[hi] == first_bad and hi - lo == 1 and not skipped
    assert len(seen) <= 3  # 6 releases between GOOD and BAD


def test_a_release_that_cannot_be_judged_leaves_a_range_not_a_guess():
    lo, hi, skipped = bisect_package.search(RELEASES, _probe("0.18.5", skip=("0.18.5",)))
    assert skipped == ["0.18.5"] and RELEASES[lo] == "0.18.4" and RELEASES[hi] == "0.18.6"  # 0.18.5 or 0.18.6
    lo, hi, skipped = bisect_package.search(RELEASES, _probe("0.18.7", skip=("0.18.6",)))
    assert (RELEASES[lo], RELEASES[hi]) == ("0.18.5", "0.18.7") and skipped == ["0.18.6"]  # 0.18.6 or 0.18.7
    lo, hi, skipped = bisect_package.search(RELEASES, _probe("0.18.8", skip=("0.18.6",)))
    assert (RELEASES[lo], RELEASES[hi]) == ("0.18.7", "0.18.8")  # a skip away from the change costs nothing


def test_the_releases_between_good_and_bad_in_order():
    assert bisect_package.between(RELEASES, "0.18.4", "0.18.6", "deepspeed") == ["0.18.4", "0.18.5", "0.18.6"]


@pytest.mark.parametrize(
    "good, bad, says",
    [
        ("0.18.4", "9.9", "BAD 9.9 is not a release of deepspeed"),
        ("0.1", "0.18.6", "GOOD 0.1 is not a release of deepspeed"),
        ("0.18.6", "0.18.4", "GOOD 0.18.6 is not older than BAD 0.18.4"),
    ],
)
def test_bad_versions_are_refused_with_a_hint(good, bad, says):
    with pytest.raises(ScalegateError) as caught:
        bisect_package.between(RELEASES, good, bad, "deepspeed")
    assert says in caught.value.message and caught.value.hint


def test_bisect_by_package_needs_a_case():
    done = subprocess.run(
        [sys.executable, "-m", "scalegate", "bisect", "--package", "deepspeed", "0.18.4", "0.18.6"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "bisect needs the case to bisect: -k EXPR" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.nightly
def test_bisect_over_three_deepspeed_releases_names_a_release_or_a_range(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("SCALEGATE_RUN_ID", "PYTEST_ADDOPTS")}
    cmd = [sys.executable, "-m", "scalegate", "bisect", "--package", "deepspeed", "0.18.3", "0.18.5"]
    cmd += ["--results-dir", str(tmp_path / "bisect"), "--envs", str(ROOT / ".venv" / "envs")]
    cmd += ["-k", "deepspeed-zero2-cnn-1x2 or single-cnn-1x1", "--scaling-strategies", "single,deepspeed-zero2"]
    cmd += ["--scaling-steps", "5", "--scaling-warmup", "2", "--scaling-max-launches", "2"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600, env=env)
    out = done.stdout + done.stderr
    assert done.returncode in (0, 1), out[-4000:]
    assert "bisect: deepspeed 0.18.3 good, 0.18.5 bad" in out
    assert "first bad release: deepspeed" in out or "is not bad against 0.18.3" in out or "is one of" in out
