"""The benchmarks are tools and the experiments stay apart (docs/testing.md): every module of benchmarks/ imports as
``benchmarks.<name>`` and answers ``--help``, none puts a path on ``sys.path`` or imports another in a cycle, and
neither benchmarks/ nor tests/ imports an experiment. Nothing here is timed."""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import io
import json
import sys
from pathlib import Path
from unittest import mock

import pytest

from tests.conftest import ROOT

TOOLS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "__init__")
RUN_BY_PYTEST = {"gpu_script_cases"}  # a test file: selftest --gpu runs it with pytest


def _imports(path: Path) -> set[str]:
    """The modules a file imports, by their full dotted names (``from a import b`` gives ``a`` and ``a.b``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_no_benchmark_or_experiment_puts_a_path_on_sys_path():
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("benchmarks", "experiments")
        for path in sorted((ROOT / folder).glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "sys.path.insert" in line or "sys.path.append" in line or "syspath_prepend" in line
    ]
    assert not offenders, f"run them as python -m benchmarks.<name> and import normally: {offenders}"


def test_the_tools_import_each_other_without_a_cycle():
    graph = {
        name: {m.split(".")[1] for m in _imports(ROOT / "benchmarks" / f"{name}.py") if m.startswith("benchmarks.")}
        for name in TOOLS
    }

    def reaches(start: str, seen: tuple[str, ...]) -> None:
        for nxt in graph[start] & set(TOOLS):
            assert nxt not in seen, f"import cycle: {' -> '.join((*seen, nxt))}"
            reaches(nxt, (*seen, nxt))

    for name in TOOLS:
        reaches(name, (name,))


def test_nothing_in_benchmarks_or_tests_imports_an_experiment():
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("benchmarks", "tests")
        for path in sorted((ROOT / folder).glob("*.py"))
        if any(m == "experiments" or m.startswith("experiments.") for m in _imports(path))
    ]
    assert not offenders, f"an experiment is no dependency: move what they need into a tool ({offenders})"


def test_no_tool_or_experiment_imports_a_test_module():
    offenders = [
        f"{path.relative_to(ROOT)} imports {m}"
        for folder in ("benchmarks", "experiments")
        for path in sorted((ROOT / folder).glob("*.py"))
        for m in sorted(_imports(path))
        if m.startswith("tests.") and m.split(".")[1].startswith(("test_", "conftest"))
    ]
    assert not offenders, f"move what they share into a helper module of tests/ (tests/runs.py): {offenders}"


@pytest.mark.parametrize("name", [t for t in TOOLS if t not in RUN_BY_PYTEST])
def test_every_tool_imports_as_a_module_and_answers_help(name):
    module = importlib.import_module(f"benchmarks.{name}")
    assert module.__doc__, f"benchmarks/{name}.py says in its docstring what it measures and how to run it"
    takes_argv = bool(inspect.signature(module.main).parameters)
    out = io.StringIO()
    with mock.patch.object(sys, "argv", [f"benchmarks.{name}", "--help"]), contextlib.redirect_stdout(out):
        with pytest.raises(SystemExit) as done:
            module.main(["--help"]) if takes_argv else module.main()
    assert done.value.code == 0 and "usage:" in out.getvalue()


def test_the_duet_replay_reads_the_recorded_rounds_and_the_canaries_raise_no_false_alarm():
    """benchmarks.duet_replay over experiments/data's default-binding canary gates: the figures docs/detection.md
    quotes (no false alarm, a 5% drop caught) come out of the recorded rounds, not a constant."""
    from benchmarks import duet_replay

    out = io.StringIO()
    argv = [
        "benchmarks.duet_replay",
        "--gates",
        "200",
        "--only",
        "sixteenth set whole gate (A/A): gloo's threads bound",
    ]
    with mock.patch.object(sys, "argv", argv), contextlib.redirect_stdout(out):
        duet_replay.main()
    rows = [line for line in out.getvalue().splitlines() if line.startswith(("| ddp A/A", "| deepspeed-zero2 A/A"))]
    assert len(rows) == 2, out.getvalue()
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[4] == "0.0%" and float(cells[6].rstrip("%")) >= 95.0, row


def test_the_duet_replay_by_run_keeps_a_recorded_runs_level_that_independent_draws_average_away(tmp_path):
    """Two A/A runs of made-up rounds, one 8% above its partner's efficiency in every round and one 8% below: drawn
    independently, a replayed gate alarms only where its first rounds all come from the low run; ``--by-run`` keeps
    one run's level through a gate, and every gate at the low run's level alarms: about half of them."""
    from benchmarks import duet_replay

    def run(level: float) -> str:
        rounds = [
            {"paired": True, "round": n, "eff_log": level + (0.002 if n % 2 else -0.002), "se": 0.01, "d_w": 0.0}
            for n in range(1, 9)
        ]
        return json.dumps({"kind": "canary", "strategy": "ddp", "note": "made up", "rounds": rounds})

    data = tmp_path / "runs.jsonl"
    data.write_text(run(0.08) + "\n" + run(-0.08) + "\n")

    def false_alarms(*extra: str) -> float:
        out = io.StringIO()
        argv = ["benchmarks.duet_replay", "--data", str(data), "--gates", "400", *extra]
        with mock.patch.object(sys, "argv", argv), contextlib.redirect_stdout(out):
            duet_replay.main()
        [row] = [line for line in out.getvalue().splitlines() if line.startswith("| ddp A/A")]
        return float(row.strip("|").split("|")[4].strip().rstrip("%"))

    independent, kept = false_alarms(), false_alarms("--by-run")
    assert 35.0 < kept < 65.0 and independent < kept - 15.0, (independent, kept)


def test_the_duet_replay_by_run_says_so_where_no_run_is_long_enough_to_keep(tmp_path):
    from benchmarks import duet_replay

    rounds = [{"paired": True, "round": 1, "eff_log": 0.01 * n, "se": 0.01, "d_w": 0.0} for n in range(4)]
    data = tmp_path / "short.jsonl"  # four gates of one round each: a set to replay, no run with a residual
    data.write_text("".join(json.dumps({"kind": "canary", "strategy": "ddp", "rounds": [r]}) + "\n" for r in rounds))
    out = io.StringIO()
    argv = ["benchmarks.duet_replay", "--data", str(data), "--gates", "10", "--by-run"]
    with mock.patch.object(sys, "argv", argv), contextlib.redirect_stdout(out):
        duet_replay.main()
    assert f"no run of {duet_replay.RUN_ROUNDS} rounds or more to keep" in out.getvalue()


def test_runs_whose_means_differ_no_more_than_their_rounds_allow_keep_no_level_of_their_own():
    """Two runs of the same rounds in another order: the between-run variance is nil, so every replayed gate is at
    the grand mean (as independent draws), not at either run's."""
    from benchmarks import duet_replay

    logs = [0.03, -0.01, 0.02, -0.04]
    rounds = [{"run": run, "eff_log": log, "se": 0.01} for run in (0, 1) for log in (logs if run else logs[::-1])]
    levels, residuals = duet_replay.by_run(rounds, "eff")
    assert levels == [pytest.approx(0.0)] and len(residuals) == 8


def test_the_replay_floors_each_set_by_the_pairing_its_rounds_ran_in():
    from benchmarks import duet_replay
    from scalegate import policy
    from scalegate.judge import duet_floors

    assert duet_replay.pairing_of({"gate_args": ["--pairing", "swap"]}) == "swap"  # a whole gate's
    assert duet_replay.pairing_of({"pairing": "alternate", "layout": "gate"}) == "alternate"  # a forced run's
    assert duet_replay.pairing_of({"gate_args": ["--max-minutes", "10"]}) == duet_replay.pairing_of({}) == "duet"
    assert duet_floors.measured_floor("script", False, "swap") == policy.RECORDED_AA_SWAP["script"][0]
    assert duet_floors.measured_floor("workload", True, "alternate") == policy.RECORDED_AA_ALTERNATE["workload"][1]
    assert duet_floors.measured_floor("script") == policy.RECORDED_AA["script"]
