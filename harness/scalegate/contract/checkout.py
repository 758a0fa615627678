"""Which scalegate a process imports: the one of a given checkout, not whichever is installed.

The package lives at ``harness/scalegate/`` (a src layout: pyproject.toml's ``package-dir``), so ``<checkout>/harness``
on sys.path makes ``import scalegate`` find that checkout's. Every process the harness starts — ranks, the warm agent,
the A/B gate's sessions of the base commit, bisect's steps — gets ``path_entry(checkout)`` first on its PYTHONPATH.
Python's path finder searches it before the editable install's finder (appended to ``sys.meta_path``), so the base
commit of an A/B run imports its own code, and a rank imports what its pytest session imported.

A checkout from before the src layout (its package was ``harness/`` itself, mapped to ``scalegate``) gets a directory
``<checkout>/.scalegate/path`` whose ``scalegate`` links to ``../../harness``: a PR's base commit may be that old.
"""

from __future__ import annotations

import os
from pathlib import Path


def own() -> Path:
    """The checkout this code was imported from (``harness/scalegate/contract/checkout.py`` -> the repository root)."""
    return Path(__file__).resolve().parents[3]


def path_entry(checkout: Path) -> Path | None:
    """A sys.path entry under which ``import scalegate`` is ``checkout``'s; None where it holds no scalegate."""
    if (checkout / "harness" / "scalegate" / "__init__.py").is_file():
        return checkout / "harness"
    if not (checkout / "harness" / "__init__.py").is_file():
        return None
    entry = checkout / ".scalegate" / "path"  # the layout before harness/scalegate/
    link = entry / "scalegate"
    if not link.is_symlink():
        entry.mkdir(parents=True, exist_ok=True)
        try:
            link.symlink_to(Path("..") / ".." / "harness", target_is_directory=True)  # relative: checkouts move
        except FileExistsError:  # another process made it first
            pass
    return entry


def environment(env: dict[str, str], checkout: Path | None = None) -> dict[str, str]:
    """``env`` with ``checkout``'s scalegate (default: this one's) first on PYTHONPATH."""
    entry = path_entry(checkout or own())
    if entry is None:
        return env
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(entry)]
    return {**env, "PYTHONPATH": os.pathsep.join([str(entry), *rest])}
