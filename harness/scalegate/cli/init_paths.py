"""The paths whose change runs the PR gate in the CI templates ``scalegate init`` writes (GitHub's ``paths:``, GitLab's
``changes:``): the training script, the repository's own modules it imports (followed from import to import, read
as ``ast`` reads them, nothing run), the dependency files that pin its stack, and scalegate's own files. A change
anywhere else (a README, a notebook) spends no GPU time.
"""

from __future__ import annotations

import ast
from pathlib import Path

# The files that say which stack the script trains with, where the repository has them
DEPENDENCY_FILES = (
    "pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "environment.yml", "environment.yaml",
    "uv.lock", "poetry.lock", "Pipfile.lock",
)  # fmt: skip
SCALEGATE_FILES = ("scaling_tests/**", "pytest.ini", "ci/scalegate*")


def imported(root: Path, script: Path) -> list[str]:
    """The script and the repository's modules it imports, directly or through each other, relative to ``root``:
    a module as its file, a package as its folder's glob."""
    root = root.resolve()
    seen: dict[str, None] = {}
    todo = [script.resolve()]
    while todo:
        path = todo.pop()
        name = _shown(root, path)
        if name in seen:
            continue
        seen[name] = None
        for found in _local_imports(root, path):
            todo.append(found)
    folders = [n.removesuffix("**") for n in seen if n.endswith("/**")]
    kept = [n for n in seen if not any(n.startswith(f) and not n.endswith("/**") for f in folders)]
    return sorted(kept, key=lambda n: (n != _shown(root, script.resolve()), n))


def trigger_paths(root: Path, script: Path, workflow: str) -> list[str]:
    """Every path whose change runs the gate: the script's imports, the dependency files the repository has,
    scalegate's files and the CI file ``workflow`` itself."""
    deps = [d for d in DEPENDENCY_FILES if (root / d).is_file()]
    deps += sorted(p.name for p in root.glob("requirements*.txt") if p.name not in deps)
    return list(dict.fromkeys([*imported(root, script), *deps, *SCALEGATE_FILES, workflow]))


def _shown(root: Path, path: Path) -> str:
    """A module's path for the trigger list: a package's __init__.py stands for its whole folder."""
    relative = path.relative_to(root).as_posix()
    if path.name == "__init__.py":
        folder = path.parent.relative_to(root).as_posix()
        return f"{folder}/**" if folder != "." else relative
    return relative


def _local_imports(root: Path, path: Path) -> list[Path]:
    """The repository's modules ``path`` imports: by name from its own folder and from the root (as ``python
    script.py`` and an installed checkout find them), relative imports from its package."""
    try:
        tree = ast.parse(path.read_text(errors="replace"), filename=str(path))
    except SyntaxError:
        return []
    bases = list(dict.fromkeys([path.parent, root]))
    found = []
    for node in ast.walk(tree):
        names: list[tuple[Path, str]] = []
        if isinstance(node, ast.Import):
            names = [(b, a.name) for a in node.names for b in bases]
        elif isinstance(node, ast.ImportFrom) and node.level:
            base = path.parent
            for _ in range(node.level - 1):
                base = base.parent
            module = node.module or ""
            names = [(base, f"{module}.{a.name}" if module else a.name) for a in node.names]
            names += [(base, module)] if module else []
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [(b, f"{node.module}.{a.name}") for a in node.names for b in bases]
            names += [(b, node.module) for b in bases]
        for base, dotted in names:
            found += _module_files(root, base, dotted)
    return found


def _module_files(root: Path, base: Path, dotted: str) -> list[Path]:
    """The file ``dotted`` names under ``base`` (a module, or a package's __init__.py), and the __init__.py of
    each package on its way; none outside ``root``."""
    parts = [p for p in dotted.split(".") if p]
    out = []
    here = base
    for part in parts:
        module, package = here / f"{part}.py", here / part / "__init__.py"
        if package.is_file():
            out.append(package)
            here = here / part
            continue
        if module.is_file():
            out.append(module)
        break
    return [p.resolve() for p in out if root in p.resolve().parents]
