"""Where the A/B gate checks out its base commit: beside the repository, at a path exactly as long as the
repository's, linked from the run directory, and removed however the gate ends (gate/worktree.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scalegate.gate import worktree
from tests.repos import base_trees_left, git


def _repo(where):
    where.mkdir(parents=True)
    git(where, "init", "-q")
    (where / "train.py").write_text("print('step')\n")
    git(where, "add", "train.py")
    git(where, "commit", "-q", "-m", "base")
    return where


@pytest.mark.parametrize("name", ["r", "ab", "abc", "repo", "my-training-repository"])
def test_the_base_tree_lies_beside_the_repository_at_a_path_as_long_as_its_own(tmp_path, name):
    repo = _repo(tmp_path / name)
    link = tmp_path / "results" / "gate-1" / "base-tree-node0"
    with worktree.base_tree(repo, "HEAD", link) as base:
        assert base.path.parent == repo.parent and len(str(base.path)) == len(str(repo)), base.path
        assert base.note == "" and (base.path / "train.py").is_file()
        assert link.is_symlink() and link.resolve() == base.path.resolve()  # where a user finds it while it runs
        assert base_trees_left(repo)  # registered while it lives
    assert not base.path.exists() and not link.is_symlink() and not base_trees_left(repo)


def test_where_no_name_of_that_length_is_free_the_tree_is_nested_in_the_run_directory_with_a_note(tmp_path):
    repo = _repo(tmp_path / "r")  # a one-character name: 16 of them, all taken below
    for c in "0123456789abcdef":
        (repo.parent / c).mkdir()
    link = tmp_path / "results" / "gate-1" / "base-tree-node0"
    with worktree.base_tree(repo, "HEAD", link) as base:
        assert base.path == link and not link.is_symlink() and (link / "train.py").is_file()
        assert "characters deeper than" in base.note and "every name of 1 character(s) beside it is taken" in base.note
    assert not link.exists() and not base_trees_left(repo)


def test_a_base_ref_that_is_no_commit_makes_nothing(tmp_path):
    repo = _repo(tmp_path / "repo")
    link = tmp_path / "results" / "gate-1" / "base-tree-node0"
    with pytest.raises(worktree.ScalegateError, match="'nope' is not a commit"):
        with worktree.base_tree(repo, "nope", link):
            pass
    assert sorted(p.name for p in repo.parent.iterdir()) == ["repo"] and not link.parent.exists()


def test_a_base_ref_outside_any_repository_says_there_is_no_repository_not_that_the_ref_is_unknown(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    link = tmp_path / "results" / "gate-1" / "base-tree-node0"
    with pytest.raises(worktree.ScalegateError, match=f"--base needs a git checkout, and {plain} is not inside one"):
        with worktree.base_tree(plain, "HEAD", link):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain"]


def test_node_0_removes_the_trees_a_killed_nodes_gate_left_by_their_links(tmp_path):
    repo = _repo(tmp_path / "repo")
    gate_dir = tmp_path / "results" / "gate-slurm-7-0"
    for node in (1, 2):  # each node's gate made its tree and was killed before removing it
        path, note = worktree.place(repo, gate_dir / f"base-tree-node{node}")
        git(repo, "worktree", "add", "--detach", "--force", str(path), "HEAD")
        assert note == "" and (path / "train.py").is_file()
    assert len(base_trees_left(repo)) == 6  # two registered, two beside the repository, two links
    removed = worktree.remove_left(repo, gate_dir)
    assert [p.name for p in removed] == ["base-tree-node1", "base-tree-node2"]
    assert not base_trees_left(repo) and not list(gate_dir.iterdir())


@pytest.mark.parametrize("name", ["repo", "répo"])  # git quotes a lock reason with a non-ASCII path in it
def test_a_tree_whose_gate_was_killed_outright_is_removed_by_the_next_and_one_in_use_is_not(tmp_path, name):
    repo = _repo(tmp_path / name)
    results = repo / "results"  # where a gate puts its runs by default
    killed = subprocess.run(  # a gate's process killed outright with its base tree checked out: no clean-up runs
        [
            sys.executable,
            "-c",
            "import os, sys; from pathlib import Path; from scalegate.gate import worktree\n"
            "with worktree.base_tree(Path(sys.argv[1]), 'HEAD', Path(sys.argv[2])) as base:\n"
            "    print(base.path, flush=True); os.kill(os.getpid(), 9)",
            str(repo),
            str(results / "gate-1" / "base-tree-node0"),
        ],
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -9 and killed.stdout.strip(), killed.stderr
    left = Path(killed.stdout.strip())
    assert (left / "train.py").is_file() and str(left) in git(repo, "worktree", "list")
    assert (results / "gate-1" / "base-tree-node0").is_symlink()  # the link the next gate removes with the tree
    with worktree.base_tree(repo, "HEAD", results / "gate-2" / "base-tree-node0") as base:
        assert worktree.sweep(repo) == [left]  # the killed one's, not this process's own
        assert not left.exists() and (base.path / "train.py").is_file()
        assert str(base.path) in git(repo, "worktree", "list")
    assert not base_trees_left(repo)  # its link in its run directory too


def test_a_bisect_killed_outright_leaves_its_tree_to_the_next_sweep(tmp_path):
    repo = _repo(tmp_path / "repo")
    where = tmp_path / "results" / "bisect" / "bisect-1" / "tree"
    killed = subprocess.run(  # cli/bisect.py's checkout, no link: its lock names the owner alone
        [
            sys.executable,
            "-c",
            "import os, sys; from pathlib import Path; from scalegate.gate import worktree\n"
            "with worktree.checkout(Path(sys.argv[1]), 'HEAD', Path(sys.argv[2])):\n"
            "    os.kill(os.getpid(), 9)",
            str(repo),
            str(where),
        ],
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -9 and (where / "train.py").is_file(), killed.stderr
    locked = [line for line in git(repo, "worktree", "list", "--porcelain").splitlines() if line.startswith("locked")]
    assert len(locked) == 1 and worktree.OWNER_RE.match(locked[0].split(" ", 1)[1])[3] is None, locked
    assert worktree.sweep(repo) == [where]
    assert not where.exists() and not base_trees_left(repo)
