"""Each side of an A/B gate runs its own tree's tests and script (gate/sides.py ``Side.command``).

The gate's run directory, where both sessions write and where the base tree is checked out, lies in the head's
repository. pytest finds its configuration from the common ancestor of the command line's existing paths, an
option's separate value included: with ``--scaling-results-dir PATH`` the base session took the head's repository
for its rootdir and the head's pytest.ini for its configuration (its addopts), and a ``scaling_script`` marker's
script path, relative to the rootdir, named the *head's* training script: an A/B gate on a team's script compared
the head's script with itself. A real pytest session, collection only (~2 s).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from scalegate.gate.project import Project
from scalegate.gate.sides import Side


def _tree(root: Path, marker: str) -> None:
    (root / "scaling_tests").mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = scaling_tests\n")
    (root / "scaling_tests" / "test_side.py").write_text(f"def test_{marker}():\n    pass\n")


def test_the_base_sides_session_reads_the_base_trees_configuration_not_the_heads(tmp_path):
    head = tmp_path / "head"
    _tree(head, "head_side")
    run = head / "results" / "gate" / "gate-1"
    base = run / "base-tree-node0"  # where the gate checks the base commit out (gate/life.py)
    _tree(base, "base_side")
    where = run / "round-01" / "base"
    empty = run / "no-baselines"
    where.mkdir(parents=True)
    empty.mkdir()
    argv = Side(name="base", tree=base, project=Project(root=head), python=sys.executable, baselines=empty).command(
        ["--co"], where
    )
    done = subprocess.run(argv, cwd=base, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert f"rootdir: {base}\n" in out, out[-3000:]  # the script's path is relative to it
    assert "<Function test_base_side>" in out and "head_side" not in out, out[-3000:]
