"""What ``scalegate init`` reads of a team's training script before it writes the script's marker: which file is
the script, and the flags it takes for its steps, its strategy, its devices and nodes, and its batch.

The flags come from the script's own ``add_argument`` calls (read, not run: no import of torch for this), else from
what its ``--help`` prints (``HfArgumentParser``, click, typer). Each role takes the first flag, in the order of its
names below, that the script has: ``--max-steps`` before ``--steps``.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from scalegate.contract.errors import ScalegateError
from scalegate.plan.script import STEP_FLAGS, flag_name

# Each role's flag names, lower case, '-' for '_', no leading dashes (as plan/script.py's STEP_FLAGS)
ROLES = {
    "steps": STEP_FLAGS,
    "strategy": ("strategy", "parallelism", "dist-strategy", "distributed-strategy"),
    "devices": ("devices", "nproc-per-node", "gpus", "num-gpus", "num-devices", "gpus-per-node"),
    "nodes": ("num-nodes", "nnodes", "nodes", "num-machines"),
    "batch": (
        "batch-size", "per-device-train-batch-size", "local-batch-size", "micro-batch-size", "train-batch-size",
        "per-gpu-batch-size", "train-micro-batch-size-per-gpu", "batch",
    ),
    "accumulation": ("gradient-accumulation-steps", "accumulate-grad-batches", "grad-accum", "gradient-accumulation"),
}  # fmt: skip
# What a role's flag is given in the marker: a placeholder scalegate fills per case
PLACEHOLDER = {"steps": "{steps}", "strategy": "{strategy}", "devices": "{nproc_per_node}", "nodes": "{nnodes}"}
# Where no training script is looked for, and what a training script does somewhere in its text
SKIPPED_DIRS = {"tests", "test", "scaling_tests", "docs", "build", "dist", "site-packages", "venv", "node_modules"}
TRAINS = (".backward(", "Trainer(", ".fit(", "optimizer.step(", "deepspeed.initialize(")
HELP_TIMEOUT_S = 300


@dataclass(frozen=True, kw_only=True)
class Flag:
    name: str  # as the script spells it: "--max_steps"
    default: object = None  # a literal default, else None
    choices: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ScriptFlags:
    path: Path
    flags: tuple[Flag, ...]
    source: str  # where they were read: "its add_argument calls" or "its --help"

    def role(self, role: str) -> Flag | None:
        """The script's flag for ``role`` (ROLES), by the order of the role's names."""
        by_name = {flag_name(f.name): f for f in self.flags}
        return next((by_name[n] for n in ROLES[role] if n in by_name), None)


def find_script(root: Path, given: str | None) -> Path:
    """``--script`` under ``root``, else the one file that looks like a training script."""
    if given:
        path = (root / given).resolve()
        if not path.is_file() or root.resolve() not in path.parents:
            raise ScalegateError(
                f"--script {given}: no such file in {root}",
                "give the training script's path relative to the repository's root, e.g. --script train.py",
            )
        return path
    found = [p for p in _python_files(root) if _trains(p)]
    if not found:
        raise ScalegateError(
            f"no training script found in {root}: no Python file outside tests/ and docs/ has a __main__ entry point "
            "that runs a backward pass, a Trainer or fit",
            "name it: python -m scalegate init --script path/to/train.py",
        )
    if len(found) > 1:
        names = ", ".join(str(p.relative_to(root)) for p in found)
        raise ScalegateError(
            f"{len(found)} training scripts found in {root}: {names}",
            f"name the one to gate: python -m scalegate init --script {found[0].relative_to(root)}",
        )
    return found[0]


def _python_files(root: Path) -> list[Path]:
    """The repository's Python files (git's list where it is a repository: nothing it ignores, like a venv)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "--", "*.py"], cwd=root, capture_output=True, text=True
    )
    names = listed.stdout.split() if listed.returncode == 0 else [str(p.relative_to(root)) for p in root.rglob("*.py")]
    out = []
    for name in sorted(names):
        parts = Path(name).parts
        if any(p in SKIPPED_DIRS or p.startswith(".") for p in parts[:-1]):
            continue
        if parts[-1] in ("setup.py", "conftest.py", "noxfile.py") or re.match(r"(test_.*|.*_test)\.py$", parts[-1]):
            continue
        out.append(root / name)
    return out


def _trains(path: Path) -> bool:
    text = path.read_text(errors="replace")
    return "__main__" in text and any(word in text for word in TRAINS)


def read_flags(path: Path, python: str = sys.executable) -> ScriptFlags:
    """The script's flags: its ``add_argument`` calls, else the ``--flags`` its ``--help`` prints."""
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as exc:
        raise ScalegateError(f"{path} is not valid Python: {exc}", "give the training script itself") from None
    flags = [flag for node in ast.walk(tree) if (flag := _argument(node)) is not None]
    if flags:
        return ScriptFlags(path=path, flags=tuple(flags), source="its add_argument calls")
    try:
        shown = subprocess.run(
            [python, str(path), "--help"], cwd=path.parent, capture_output=True, text=True, timeout=HELP_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        shown = None
    text = (shown.stdout + shown.stderr) if shown is not None else ""
    names = dict.fromkeys(re.findall(r"(?<![\w-])(--[A-Za-z][\w-]*)", text))
    return ScriptFlags(path=path, flags=tuple(Flag(name=n) for n in names), source="its --help")


def _argument(node: ast.AST) -> Flag | None:
    """``parser.add_argument("--max-steps", type=int, default=60)`` as a Flag; None for anything else."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
        return None
    names = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
    if not names:
        return None
    given = {k.arg: k.value for k in node.keywords if k.arg}
    default = _literal(given.get("default"))
    choices = _literal(given.get("choices"))
    listed = tuple(str(c) for c in choices) if isinstance(choices, (list, tuple)) else ()
    return Flag(name=names[0], default=default, choices=listed)


def _literal(node: ast.AST | None) -> object:
    try:
        return ast.literal_eval(node) if node is not None else None
    except (ValueError, TypeError, SyntaxError):  # a name or a call: not known without running the script
        return None
