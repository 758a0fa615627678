"""``python -m scalegate bisect``: git bisect run with the A/B gate as its predicate, on a throwaway repository
of four commits whose third slows DDP's step (a synchronous host-side check, as in tests/test_gate.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from scalegate.cli import bisect
from scalegate.contract.errors import ScalegateError
from tests.repos import SLOW_COMMIT, checkout_repo, commit_change


def test_the_selection_leaves_parity_out_and_needs_a_case():
    assert bisect.selection(["-k", "ddp-cnn-1x2", "--scaling-steps", "5"]) == [
        "-k",
        "(ddp-cnn-1x2) and not parity",
        "--scaling-steps",
        "5",
    ]
    assert bisect.selection(["-kfsdp"]) == ["-k(fsdp) and not parity"]
    with pytest.raises(ScalegateError, match="bisect needs the case to bisect: -k EXPR"):
        bisect.selection(["--scaling-steps", "5"])


def test_a_step_is_bad_on_a_regression_good_when_all_ok_else_skipped():
    assert bisect.verdict({"cases": [{"status": "ok"}, {"status": "regressed"}]}) == bisect.BAD
    assert bisect.verdict({"cases": [{"status": "ok"}, {"status": "ok"}]}) == bisect.GOOD
    assert bisect.verdict({"cases": [{"status": "ok"}, {"status": "noisy"}]}) == bisect.SKIP  # never a guess
    assert bisect.verdict({"cases": []}) == bisect.SKIP


def test_a_step_gives_the_gate_every_option_of_its_command_line():
    """A step runs gate.main in-process; its arguments come from the gate's parser (a hand-made Namespace once
    lacked --base-python, and every step died with an AttributeError)."""
    from scalegate.cli import gate

    args, extra = gate.namespace(["-k", "ddp", "--scaling-max-launches=3"], base="abc123", json="step.json")
    assert (args.base, args.base_python, args.markdown, args.json) == ("abc123", None, None, "step.json")
    assert args.results_dir == "results/gate" and args.handler is gate.main and args.pairing == "auto"
    assert extra == ["-k", "ddp"] and args.forward == ["--scaling-max-launches=3"] and args.scaling_max_launches == 3


def test_a_crash_of_the_gate_stops_the_bisect_instead_of_calling_the_commit_bad(tmp_path, monkeypatch, capsys):
    from scalegate.cli import gate

    def crash(args, user_args):
        raise AttributeError("'Namespace' object has no attribute 'base_python'")

    monkeypatch.setattr(gate, "main", crash)
    monkeypatch.chdir(tmp_path)  # not a repository: the commit reads as ""
    assert bisect.step(["abc123", str(tmp_path), "-k", "ddp-cnn-1x2"]) == bisect.ABORT >= 128
    out = capsys.readouterr().out
    assert "bisect: the gate crashed at" in out and "AttributeError: 'Namespace' object" in out and "stopped" in out


def _history(where):
    """base, a neutral commit, the slow one, another neutral one: (their hashes in order)."""
    return [
        checkout_repo(where),
        commit_change(where, "a README line"),
        commit_change(where, "DDP's step waits 12 ms", SLOW_COMMIT),
        commit_change(where, "another README line"),
    ]


@pytest.mark.slow
@pytest.mark.nightly
def test_bisect_finds_the_commit_that_slowed_ddp(tmp_path):
    repo = tmp_path / "repo"
    commits = _history(repo)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scalegate",
            "bisect",
            commits[0],
            commits[-1],
            "--results-dir",
            str(tmp_path / "bisect"),
            "-k",
            "ddp-cnn-1x2",
            "--scaling-strategies",
            "ddp",
            "--scaling-steps",
            "10",
            "--scaling-warmup",
            "2",
            "--scaling-local-steps",
            "20",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert f"bisect: {commits[2][:12]} is bad (ddp-cnn-1x2:tiny regressed)" in done.stdout, done.stdout[-4000:]
    if f"bisect: {commits[1][:12]} is skipped" in done.stdout:  # its A/A stayed undecided (a loaded host): a range
        assert done.returncode == 1 and f"bisect: could be {commits[2][:7]} DDP's step waits 12 ms" in done.stdout
        assert f"bisect: could be {commits[1][:7]} a README line" in done.stdout
    else:
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        assert f"bisect: first bad commit: {commits[2][:7]} DDP's step waits 12 ms" in done.stdout
    # the user's checkout is untouched: no bisect in progress, no worktree left
    assert subprocess.run(["git", "bisect", "log"], cwd=repo, capture_output=True).returncode != 0
    assert subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True, text=True).stdout.count("\n") == 1
    assert (
        subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
        == commits[-1]
    )
