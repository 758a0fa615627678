"""The base commit of an A/B gate run, checked out beside the working tree and always removed afterwards.

    with worktree.base_tree(root, "origin/main", gate_dir / "base-tree-node0") as base:
        ...  # base.path holds the commit's files; base.commit its full hash; base.note says where it is not beside

A ``git worktree`` (detached) shares the repository's objects, so a checkout costs the files only. The gate puts it
beside the repository, in a hidden directory whose path is exactly as long as the repository's (``place``), and
links it from the run directory: every path either side's ranks see (their directory, ``sys.path``, the script's
path, every module's file) is then as long as the other side's. A base tree nested in the run directory, 23 or more
characters deeper, doubled the variance of a script's 1x1 reference in forced A/A swap rounds
(docs/evidence/swap.md#where-the-bases-tree-lies). Both sides run in the same Python environment unless
``--base-python`` names the base side's (harness/scalegate/gate/environments.py): then a PR that changes a
dependency's version is measured too (docs/gate.md).
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import secrets
import shutil
import socket
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
    note: str = ""  # where the tree's path is not as long as the working tree's: where it is, and why


# the name of a base tree beside the repository: hidden, "sg" where the name has room, random hex to the length
PREFIX = ".sg"
TRIES = 64
# every tree scalegate checks out is locked in git with its owner, so a later run can tell one whose process was
# killed outright (no clean-up ran) from one in use (``sweep``), and the link to it a run directory holds
OWNER = "scalegate: pid {pid} on {host}"
LINKED = ", linked from {link}"
OWNER_RE = re.compile(r"scalegate: pid (\d+) on ([^\s,]+)(?:, linked from (.+))?$")


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise ScalegateError(
            "git is not installed: --base needs it to check out the base commit",
            "install git, or run the gate without --base (against the stored baselines)",
        ) from None


def toplevel(start: Path, needs: str = "--base") -> Path:
    """The repository that holds ``start``; bad input when there is none (``needs``: what needs one)."""
    done = _git(start, "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise ScalegateError(
            f"{needs} needs a git checkout, and {start} is not inside one",
            "run it from your repository's checkout" + (", or drop --base" if needs == "--base" else ""),
        )
    return Path(done.stdout.strip())


def resolve(root: Path, ref: str, what: str = "--base") -> str:
    done = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        toplevel(root)  # no repository at all: that is the error, not the ref
        raise ScalegateError(
            f"{what} {ref!r} is not a commit of {root}",
            "fetch it first (e.g. `git fetch origin main` and --base origin/main), or pass a hash",
        )
    return done.stdout.strip()


@contextlib.contextmanager
def checkout(root: Path, ref: str, path: Path, link: Path | None = None) -> Iterator[Tree]:
    """``ref`` of ``root`` checked out (detached) at ``path`` for the duration; removed however the block ends. Its
    lock names its owner and ``link``, the run directory's link to it, so that ``sweep`` removes both."""
    commit = resolve(root, ref)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = _git(root, "worktree", "add", "--detach", "--force", str(path), commit)
    if done.returncode != 0:
        raise ScalegateError(
            f"could not check out --base {ref} ({commit[:12]}) at {path}: {done.stderr.strip()}",
            "remove the directory, run `git worktree prune`, and rerun",
        )
    try:
        # locked apart from `add`, whose --reason needs git 2.33 (Ubuntu 20.04 has 2.25); `lock --reason` has 2.10
        owner = OWNER.format(pid=os.getpid(), host=socket.gethostname()) + (LINKED.format(link=link) if link else "")
        _git(root, "worktree", "lock", "--reason", owner, str(path))
        yield Tree(path=path, commit=commit, ref=ref)
    finally:
        remove(root, path)


def remove(root: Path, path: Path) -> None:
    """The tree at ``path`` removed and unregistered; where ``path`` is the run directory's link to a tree beside the
    repository, that tree and the link."""
    tree = Path(os.readlink(path)) if path.is_symlink() else path
    if _git(root, "worktree", "remove", "--force", "--force", str(tree)).returncode != 0:  # twice: it is locked
        shutil.rmtree(tree, ignore_errors=True)
    if path.is_symlink():
        path.unlink()
    _git(root, "worktree", "prune")


def place(root: Path, link: Path) -> tuple[Path, str]:
    """An empty directory for the base tree beside ``root``, its path exactly as long as ``root``'s, linked from
    ``link`` (in the gate's run directory) while it lives; with a note, ``link`` itself where none can be made there
    (the parent not writable, every name of that length taken)."""
    length = len(os.fsencode(root.name))  # bytes, as a rank's environment and arguments hold them
    head = PREFIX if length > len(PREFIX) else "."[: length - 1]
    why = f"every name of {length} character(s) beside it is taken"
    for _ in range(TRIES):
        path = root.parent / (head + secrets.token_hex(length)[: length - len(head)])
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            why = f"{root.parent} is not writable ({exc.strerror})"
            break
        try:
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(path)
        except OSError as exc:
            path.rmdir()
            why = f"the link {link} could not be made ({exc.strerror})"
            break
        return path, ""
    note = (
        f"the base commit is checked out at {link}, {len(str(link)) - len(str(root))} characters deeper than {root}: "
        f"{why}. A script's swap rounds spread more where the two sides' paths differ in length (docs/duet.md)"
    )
    return link, note


def sweep(root: Path) -> list[Path]:
    """The trees scalegate (a gate, a bisect) checked out on this host for a process that is gone (killed outright:
    SIGKILL, the OOM killer), removed with the links to them that their locks name; the ones removed. A tree whose
    owner runs, or that another host made, is left alone."""
    listed = _git(root, "worktree", "list", "--porcelain").stdout
    gone = []
    for block in listed.split("\n\n"):
        fields = dict(line.split(" ", 1) for line in block.splitlines() if " " in line)
        owner = OWNER_RE.match(_unquoted(fields.get("locked", "")))
        if not owner or owner[2] != socket.gethostname() or _running(int(owner[1])):
            continue
        tree, link = Path(fields["worktree"]), Path(owner[3]) if owner[3] else None
        linked = link is not None and link.is_symlink() and Path(os.readlink(link)) == tree
        remove(root, link if linked else tree)  # given the link, the tree and the link
        gone.append(tree)
    return gone


def _unquoted(reason: str) -> str:
    """A lock reason as ``git worktree list --porcelain`` prints it, unquoted: git quotes one that holds a byte
    outside printable ASCII (a link under ``/home/josé``) as a C string, octal escapes and all."""
    if len(reason) < 2 or not reason.startswith('"') or not reason.endswith('"'):
        return reason
    return codecs.escape_decode(reason[1:-1].encode("ascii", "backslashreplace"))[0].decode(errors="surrogateescape")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_left(root: Path, gate_dir: Path) -> list[Path]:
    """The base trees other nodes' gates left (a node killed before its own clean-up), found by their links in
    ``gate_dir`` and removed where this node sees them (a shared filesystem); the ones removed."""
    left = sorted(p for p in gate_dir.glob("base-tree-node*") if p.is_symlink() or p.is_dir())
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
def base_tree(root: Path, ref: str | None, link: Path) -> Iterator[Tree]:
    """The A/B gate's base side: ``ref`` checked out beside ``root`` at a path as long as its own (``place``), linked
    from ``link``; or, without a ref (``--base-python`` alone: the same code in another environment), the working
    tree itself, left as it is."""
    if ref:
        resolve(root, ref)  # bad input before anything is made
        path, note = place(root, link)
        try:
            with checkout(root, ref, path, link if path != link else None) as tree:
                yield Tree(path=tree.path, commit=tree.commit, ref=tree.ref, note=note)
        finally:
            if link.is_symlink():
                link.unlink()
            if path != link and path.is_dir() and not any(path.iterdir()):
                path.rmdir()  # made by place, left empty where the checkout failed
        return
    done = _git(root, "rev-parse", "HEAD")
    yield Tree(path=root, commit=done.stdout.strip() if done.returncode == 0 else "", ref="the working tree")
