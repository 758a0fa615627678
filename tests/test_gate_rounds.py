"""The gate's round loop and its sessions alone (gate/rounds.py, gate/paired.py, gate/sessions.py, gate/sides.py):
sides whose sessions are one-line Python processes, a coordinator that only takes notes. The whole gate, with real
sessions and ranks, is in tests/test_gate.py and tests/test_gate_nodes.py."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pytest

from scalegate.gate import merge, rounds
from scalegate.gate.paired import Paired, Place, at_once
from scalegate.gate.project import Project
from scalegate.gate.sessions import NoCases, Sessions, check_run
from scalegate.gate.sides import Side

SESSION = (
    "import os, sys\n"
    "where, said, line, code = sys.argv[1:]\n"
    "os.makedirs(os.path.join(where, 'latest'), exist_ok=True)\n"
    "open(said, 'a').write(line + '\\n')\n"
    "print('session of', line)\n"
    "sys.exit(int(code))\n"
)


@dataclass(frozen=True, kw_only=True)
class OneLiner:
    """A side whose session writes an empty run and one line of what it was given (to ``said``, in its tree)."""

    name: str
    said: Path
    code: int = 0

    @property
    def tree(self) -> Path:
        return self.said.parent

    def command(self, args: Sequence[str], where: Path, paired: Sequence[str] = ()) -> list[str]:
        line = " ".join([self.name, *args, *paired])
        return [sys.executable, "-c", SESSION, str(where), str(self.said), line, str(self.code)]

    def environment(self) -> dict[str, str]:
        return dict(os.environ)


@dataclass
class Notes:
    """A coordinator that takes notes."""

    address: str = "unix:/nowhere"
    tcp_address: str = ""
    nodes: object = None
    rounds: list[tuple[dict, str]] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)

    def round_started(self, refused=None, first="head") -> None:
        self.rounds.append((dict(refused or {}), first))

    def side_ended(self, side: str) -> None:
        self.ended.append(side)


def _sides(tmp_path: Path, code: int = 0) -> list[OneLiner]:
    return [OneLiner(name=n, said=tmp_path / "said.txt", code=code) for n in ("base", "head")]


def test_paired_rounds_run_both_sessions_at_once_each_round_the_other_side_first_then_the_undecided_only(
    tmp_path, capsys
):
    notes = Notes()
    paired = Paired(pairing="duet", address=notes.address, coordinator=notes, refusals=lambda merged: {"c": "no room"})
    found = rounds.run(
        rounds.Rounds(
            sides=_sides(tmp_path),
            args=["-q"],
            gate_dir=tmp_path / "gate",
            undecided=lambda merged: ["[c]"],
            budgets=merge.Budgets(3),
            sessions=Sessions(),
            paired=paired,
        )
    )
    assert notes.rounds == [({"c": "no room"}, "head"), ({"c": "no room"}, "base"), ({"c": "no room"}, "head")]
    assert sorted(notes.ended) == ["base"] * 3 + ["head"] * 3
    said = (tmp_path / "said.txt").read_text().splitlines()
    duet = "--scaling-duet=unix:/nowhere --scaling-duet-side={} --scaling-duet-pairing=duet"
    assert f"head -q {duet.format('head')}" in said and f"base -q -k [c] {duet.format('base')}" in said
    assert found.codes == (0, 0, 0) and [len(found.runs[s]) for s in ("base", "head")] == [3, 3]
    assert (tmp_path / "gate" / "round-03" / "head" / "session.log").read_text().startswith("session of head")
    out = capsys.readouterr().out
    assert out.count("HINT: --pairing swap keeps such jobs paired") == 1  # once a gate
    assert "gate: round 3 done in" in out and "undecided: [c]" in out


def test_a_deadline_ends_the_rounds_with_a_note_and_no_case_is_a_typed_error(tmp_path):
    found = rounds.run(
        rounds.Rounds(
            sides=_sides(tmp_path)[1:],
            args=[],
            gate_dir=tmp_path / "gate",
            undecided=lambda merged: ["[c]"],
            budgets=merge.Budgets(5),
            sessions=Sessions(),
            deadline=time.monotonic(),
        )
    )
    assert len(found.notes) == 1 and found.notes[0].startswith("the gate stopped after round 1: another round")
    assert (tmp_path / "gate" / "round-01" / "latest").is_dir()  # one side: its round's run directly there
    nothing = rounds.Rounds(
        sides=_sides(tmp_path, code=5),
        args=[],
        gate_dir=tmp_path / "none",
        undecided=lambda merged: [],
        budgets=merge.Budgets(2),
        sessions=Sessions(),
    )
    with pytest.raises(NoCases) as raised:
        rounds.run(nothing)
    assert (
        raised.value.message == "round 1 of the gate (base commit): no scaling case was selected (pytest exit code 5)"
    )
    assert "scaling_script" in raised.value.hint


def test_one_loop_runs_a_paired_round_for_any_node_which_only_watches_it_its_own_way(tmp_path):
    seen: list[tuple[str, int]] = []

    class Watch:
        waits = 0

        def ended(self, side: str, code: int, log: Path) -> None:
            seen.append((side, code))
            assert log.name == "session-node1.log" and log.read_text().startswith(f"session of {side}")

        def wait(self) -> None:
            Watch.waits += 1
            time.sleep(0.05)

    place = Place(gate_dir=tmp_path, n=2, log="session-node1.log")
    codes = at_once(
        _sides(tmp_path, code=1), ["-q"], place, Paired(pairing="alternate", address="tcp:h:1"), Sessions(), Watch()
    )
    assert codes == {"base": 1, "head": 1} and sorted(seen) == [("base", 1), ("head", 1)] and Watch.waits >= 1


def test_a_stopped_gate_ends_the_sessions_it_owns_and_only_those():
    mine, other = Sessions(), Sessions()
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    env = dict(os.environ)
    procs = [mine.start(sleeper, tree=Path.cwd(), env=env) for _ in range(2)]
    theirs = other.start(sleeper, tree=Path.cwd(), env=env)
    with pytest.raises(KeyboardInterrupt), mine.ending():
        raise KeyboardInterrupt
    assert all(p.poll() is not None for p in procs) and not mine.live
    assert theirs.poll() is None
    other.stop()


def test_a_rounds_session_is_told_its_launch_budget_once_after_the_users_arguments(tmp_path):
    side = Side(
        name="base",
        tree=tmp_path,
        project=Project(root=tmp_path, tests=["scaling_tests"]),
        python="py",
        settings=("--scaling-tolerance", "0.05"),
        baselines=tmp_path / "empty",
    )
    argv = side.command(["--scaling-max-launches", "4", "-k", "x"], tmp_path / "r", ["--scaling-duet=unix:/s"])
    assert argv[:6] == ["py", "-m", "pytest", "-p", "no:cacheprovider", "scaling_tests"]
    assert argv.index("--scaling-tolerance") < argv.index(f"--scaling-results-dir={tmp_path / 'r'}") < argv.index("-k")
    assert argv.count("--scaling-max-launches") == 2 and argv[-4:] == [
        "--scaling-duet=unix:/s",
        "--scaling-max-launches",
        "1",
        f"--scaling-baseline-dir={tmp_path / 'empty'}",
    ]  # the user's 4, then the round's 1: the round's wins


def test_check_run_reads_the_run_a_session_wrote_or_says_why_not(tmp_path):
    (tmp_path / "latest").mkdir()
    assert check_run(0, tmp_path, "x") == (tmp_path / "latest").resolve()
    with pytest.raises(NoCases):
        check_run(5, tmp_path, "x")
    with pytest.raises(Exception, match="x: the scaling suite could not run \\(pytest exit code 4"):
        check_run(4, tmp_path, "x")
