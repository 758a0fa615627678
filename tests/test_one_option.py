"""An option is one field: added to a section a case carries (contract/sections.py), it is an option of ``pytest
--help``, of ``python -m scalegate gate --help`` (checked there, and passed on to every session), a row of
docs/options.md, and a value every rank reads from its spec, with nothing else edited.

The test adds the field to a copy of the package, as a developer would to the package itself, and runs each of
those from the copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

FIELD = '    knob: int = option(7, "a throwaway option (default: %(default)s)", check=Whole(0))\n'
ANCHOR = "    memory_interval_ms: float = option("

# run in the copy: the docs page, the gate's help and what it passes on, and a case's spec as the plugin builds it
PYTEST_SIDE = """
import argparse, contextlib, io, json, sys
from pathlib import Path

from scalegate.cli import forward, gate, reference
from scalegate.contract.spec import CaseSpec
from scalegate.plan import hostinfo, matrix, options

found = {"docs": [line for line in reference.markdown().splitlines() if line.startswith("| `--scaling-knob`")]}
args, extra = gate.namespace(["--base", "main", "--scaling-knob", "9", "-k", "cnn"])
found["passed_on"] = forward.passed_on(args, extra)
sub = argparse.ArgumentParser().add_subparsers()
gate.add_parser(sub)
found["gate_help"] = "--scaling-knob" in sub.choices["gate"].format_help()
with contextlib.redirect_stderr(io.StringIO()) as said, contextlib.suppress(SystemExit):
    gate.namespace(["--scaling-knob", "-1"])
found["gate_refuses"] = said.getvalue().strip().splitlines()[-2:]
opts = options.from_argv(["--scaling-knob", "9", "--scaling-steps", "1", "--scaling-warmup", "0"])
matrix.spec_for("single", "cnn", "1x1", opts, hostinfo.detect()).write(Path(sys.argv[1]))
found["read"] = CaseSpec.read(Path(sys.argv[1])).run.knob  # as a rank reads it
print(json.dumps(found))
"""

# run in the copy: the rank's entry point, noting what the spec it read holds
RANK = """
import json, sys
from scalegate.contract.spec import CaseSpec
from scalegate.worker import entry

read = CaseSpec.read

def noted(path):
    spec = read(path)
    open(sys.argv[3], "w").write(json.dumps(spec.run.knob))
    return spec

CaseSpec.read = noted
sys.exit(entry.main(sys.argv[1:3]))
"""


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> dict[str, str]:
    """The environment that runs this checkout's package with one field added to ``Run``."""
    root = tmp_path_factory.mktemp("one-option")
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "harness", root / "harness", symlinks=True, ignore=skip)
    shutil.copytree(ROOT / "fixtures", root / "fixtures", ignore=skip)  # harness/scalegate/workloads links to it
    sections = root / "harness" / "scalegate" / "contract" / "sections.py"
    text = sections.read_text()
    assert text.count(ANCHOR) == 1, "Run's last field moved: name another one to add the throwaway field before"
    sections.write_text(text.replace(ANCHOR, FIELD + ANCHOR))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "SCALEGATE_RUN_ID")}
    return {**env, "PYTHONPATH": str(root / "harness")}


def _run(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module")
def built(copy, tmp_path_factory) -> tuple[dict, Path]:
    """What the copy's pytest side says of the field, and the SPEC.json of a case its options made."""
    spec_path = tmp_path_factory.mktemp("spec") / "SPEC.json"
    return json.loads(_run(copy, "-c", PYTEST_SIDE, str(spec_path)).stdout), spec_path


def test_a_field_added_to_a_section_is_an_option_of_pytest_the_gate_and_the_docs(copy, built):
    found, spec_path = built
    assert found["docs"] == ["| `--scaling-knob` | `7` | a throwaway option (default: 7) |"]
    assert found["gate_help"] and "--scaling-knob=9" in found["passed_on"]
    assert found["gate_refuses"][-1] == "HINT: pass --scaling-knob 0 or more"
    assert "--scaling-knob=-1 is below 0" in found["gate_refuses"][0]
    assert "--scaling-knob" in _run(copy, "-m", "pytest", "--help", "-p", "no:cacheprovider").stdout
    assert json.loads(spec_path.read_text())["knob"] == 9  # SPEC.json, as the launchers hand it to the ranks
    assert found["read"] == 9


def test_a_field_added_to_a_section_reaches_a_rank(copy, built, tmp_path):
    seen = tmp_path / "seen.json"
    (tmp_path / "out").mkdir()
    _run(copy, "-c", RANK, str(built[1]), str(tmp_path / "out"), str(seen))
    assert json.loads(seen.read_text()) == 9
    assert (tmp_path / "out" / "rank0.json").is_file()  # the rank ran its case with it
