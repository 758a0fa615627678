"""The base commit of an A/B gate run, checked out beside the working tree and always removed afterwards.

    with worktree.checkout(root, "origin/main", gate_dir / "base-tree") as base:
        ...  # base.path holds the commit's files; base.commit its full hash

A ``git worktree`` (detached) shares the repository's objects, so a checkout costs the files only. Both
sides run in the same Python environment unless ``--base-python`` names the base side's
(harness/scalegate/gate/environments.py): then a PR that changes a dependency's version is measured too (docs/gate.md).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from scalegate.contract.errors import ScalegateError


@dataclass(frozen=True, kw_only=True)
class Tree:
    path: Path
    commit: str
    ref: str


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise ScalegateError(
            "git is not installed: --base needs it to check out the base commit",
            "install git, or run the gate without --base (against the stored baselines)",
        ) from None


def toplevel(start: Path) -> Path:
    """The repository that holds ``start``; bad input when there is none."""
    done = _git(start, "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise ScalegateError(
            f"--base needs a git checkout, and {start} is not inside one",
            "run the gate from your repository's checkout, or drop --base",
        )
    return Path(done.stdout.strip())


def resolve(root: Path, ref: str, what: str = "--base") -> str:
    done = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise ScalegateError(
            f"{what} {ref!r} is not a commit of {root}",
            "fetch it first (e.g. `git fetch origin main` and --base origin/main), or pass a hash",
        )
    return done.stdout.strip()


@contextlib.contextmanager
def checkout(root: Path, ref: str, path: Path) -> Iterator[Tree]:
    """``ref`` of ``root`` checked out (detached) at ``path`` for the duration; removed however the block ends."""
    commit = resolve(root, ref)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = _git(root, "worktree", "add", "--detach", "--force", str(path), commit)
    if done.returncode != 0:
        raise ScalegateError(
            f"could not check out --base {ref} ({commit[:12]}) at {path}: {done.stderr.strip()}",
            "remove the directory, run `git worktree prune`, and rerun",
        )
    try:
        yield Tree(path=path, commit=commit, ref=ref)
    finally:
        remove(root, path)


def remove(root: Path, path: Path) -> None:
    if _git(root, "worktree", "remove", "--force", str(path)).returncode != 0:
        shutil.rmtree(path, ignore_errors=True)
    _git(root, "worktree", "prune")


def remove_left(root: Path, gate_dir: Path) -> list[Path]:
    """The base trees other nodes' gates left under ``gate_dir`` (a node killed before its own clean-up), removed
    where this node sees them (a shared filesystem); the ones removed."""
    left = sorted(p for p in gate_dir.glob("base-tree-node*") if p.is_dir())
    for path in left:
        remove(root, path)
    return left


def copy_checkout(root: Path, dest: Path) -> None:
    """The working tree's files (tracked, and untracked ones git does not ignore) copied to ``dest``: a fresh
    repository for tests and benchmarks that need commits of their own (experiments/detection_ab.py, tests)."""
    names = _git(root, "ls-files", "-co", "--exclude-standard").stdout.split()
    for name in names:
        if (root / name).is_symlink():  # the workloads link (harness/scalegate/workloads -> ../../fixtures)
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).symlink_to(os.readlink(root / name))
        elif (root / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes((root / name).read_bytes())


@contextlib.contextmanager
def base_tree(root: Path, ref: str | None, path: Path) -> Iterator[Tree]:
    """The A/B gate's base side: ``ref`` checked out at ``path`` (``checkout``), or, without a ref (``--base-python``
    alone: the same code in another environment), the working tree itself, left as it is."""
    if ref:
        with checkout(root, ref, path) as tree:
            yield tree
        return
    done = _git(root, "rev-parse", "HEAD")
    yield Tree(path=root, commit=done.stdout.strip() if done.returncode == 0 else "", ref="the working tree")
