"""Each tuned default is defined once, in scalegate/policy.py or its option's declaration, and read from there; the
pairing names are one tuple.

A value chosen from measurements (a launch budget, an error rate, a drop to catch, a number of pairs) written again
as a literal, or under a second name, drifts from its evidence the day one of the two is changed. The test lists the
tuned settings and the names that carry them, and reads every module of the package and its tools for a second
definition: a literal default of a field or parameter of that name, a literal keyword to a class with such a field,
or a module-level name bound to the setting again.
"""

from __future__ import annotations

import ast
from pathlib import Path

from scalegate import policy
from scalegate.contract.sections import PAIRINGS
from tests.conftest import ROOT

# the tuned setting in policy.py -> the names of the fields, parameters and keywords that carry it
TUNED = {
    "MAX_LAUNCHES": ("max_launches",),
    "ALPHA": ("alpha",),
    "BETA": ("beta",),
    "DETECT": ("detect", "local_tolerance"),
    "LOCAL_STEPS": ("local_steps",),
    "PARITY_TOLERANCE": ("parity_tolerance", "throughput_tolerance"),
    "LEDGER_TOLERANCE": ("ledger_tolerance",),
    "RECORDED_TOLERANCE": ("default_tolerance", "recorded_tolerance"),
    "AB_GATE_TOLERANCE": ("ab_gate_tolerance",),
    "STORED_GATE_TOLERANCE": ("stored_gate_tolerance",),
    "GATE_MAX_LAUNCHES": ("gate_max_launches",),
    "SCRIPT_ROUNDS": ("script_rounds",),
    "ALTERNATE_ROUNDS": ("alternate_rounds",),
    "SWAP_TURN_STEPS": ("swap_turn_steps",),
}
CARRIERS = {name: tuned for tuned, names in TUNED.items() for name in names}
POLICY = ROOT / "harness" / "scalegate" / "policy.py"
TREES = ("harness/scalegate", "benchmarks", "experiments")


def _modules() -> list[tuple[Path, ast.Module]]:
    found = []
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            if path.resolve() != POLICY and "workloads" not in path.relative_to(ROOT).parts:
                found.append((path, ast.parse(path.read_text(), filename=str(path))))
    return found


def _literal(node: ast.AST | None) -> bool:
    """A number written out, other than 0 (a count of none, a window off)."""
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value != 0


def _option_default(node: ast.AST | None) -> ast.AST | None:
    """``option(DEFAULT, ...)``: the default a declared option's field gets."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "option" and node.args:
        return node.args[0]
    return node


def _classes_with(modules: list[tuple[Path, ast.Module]]) -> set[str]:
    """The classes of the package with a field that carries a tuned setting: their keywords carry it too."""
    return {
        node.name
        for _, module in modules
        for node in ast.walk(module)
        if isinstance(node, ast.ClassDef)
        and any(isinstance(s, ast.AnnAssign) and getattr(s.target, "id", "").lower() in CARRIERS for s in node.body)
    }


def _second_definitions(path: Path, module: ast.Module, classes: set[str]) -> list[str]:
    where = path.relative_to(ROOT)
    found = []
    for node in ast.walk(module):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "").lower() in CARRIERS:
            if _literal(_option_default(node.value)):
                found.append(f"{where}:{node.lineno}: {node.target.id} = {ast.unparse(node.value)}")  # type: ignore[union-attr]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            defaulted = positional[len(positional) - len(args.defaults) :]
            for arg, default in [*zip(defaulted, args.defaults), *zip(args.kwonlyargs, args.kw_defaults)]:
                if arg.arg.lower() in CARRIERS and _literal(default):
                    found.append(f"{where}:{node.lineno}: {node.name}({arg.arg}={ast.unparse(default)})")  # type: ignore[arg-type]
        elif isinstance(node, ast.Call) and (getattr(node.func, "id", "") or getattr(node.func, "attr", "")) in classes:
            for kw in node.keywords:
                if kw.arg and kw.arg.lower() in CARRIERS and _literal(kw.value):
                    found.append(f"{where}:{node.lineno}: {ast.unparse(node.func)}({kw.arg}={ast.unparse(kw.value)})")
    for node in module.body:  # a module-level name for a setting: the setting again, or an alias of it
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for target in targets:
            name = getattr(target, "id", "")
            if name in TUNED or name.lower() in CARRIERS:
                found.append(f"{where}:{node.lineno}: {name} = {ast.unparse(node.value)}")  # type: ignore[arg-type]
    return found


def test_each_tuned_setting_is_defined_once_in_policy():
    for name in TUNED:
        assert hasattr(policy, name), f"policy.{name} is listed here as a tuned setting and is not in policy.py"
    modules = _modules()
    classes = _classes_with(modules)
    assert {"Conduct", "Design", "Sequential", "Windows"} <= classes  # the test reads the classes that carry them
    found = [line for path, module in modules for line in _second_definitions(path, module, classes)]
    assert not found, "a tuned setting defined again (define it in policy.py, read it from there):\n" + "\n".join(found)


def test_the_pairing_names_are_one_tuple():
    """contract/sections.py's ``PAIRINGS``: the gate's choices, a session's and an experiment's are read from it. A
    tuple of two names or more anywhere else is a second list (a test of membership, ``x in ("swap", ...)``, is
    not)."""
    found = []
    for path, module in _modules():
        tested = {
            id(node.comparators[0])
            for node in ast.walk(module)
            if isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn))
        }
        for node in ast.walk(module):
            if isinstance(node, (ast.Tuple, ast.List)) and id(node) not in tested:
                words = {e.value for e in node.elts if isinstance(e, ast.Constant)} & set(PAIRINGS)
                if len(words) >= 2 and path.name != "sections.py":
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "the pairing names listed again (read contract/sections.py's PAIRINGS):\n" + "\n".join(found)
