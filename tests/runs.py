"""Synthetic run directories in the session's result format, and the history commands run over them: what the
history's tests and the change-point comparison (experiments/changepoint_compare.py) both build their histories from.

``case`` is a result file with the fields the history reads; ``series_runs`` and ``nightlies`` are whole histories
with a planted change; ``run`` is ``python -m scalegate ARGS`` in this process.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from pathlib import Path

import numpy as np

from scalegate.cli import main as harness_main

PROFILE = "cpu-test-2c-torch2.13.0"


def write_run(directory: Path, *cases: dict) -> Path:
    directory.mkdir(parents=True)
    for case in cases:
        (directory / f"{case['case_id']}.json").write_text(json.dumps(case))
    return directory


def run(*args) -> subprocess.CompletedProcess:
    """``python -m scalegate ARGS`` in this process, from where the test stands (``cli``: from the repository's root)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = harness_main.main([str(a) for a in args])
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def case(
    case_id: str,
    efficiency: float,
    *,
    memory: float = 400e6,
    wire: float = 9.8e6,
    status: str = "ok",
    commit: str = "c",
    written: float = 0.0,
    profile: str = PROFILE,
    versions: dict | None = None,
) -> dict:
    """The fields of results/<run>/<case>.json that the history reads."""
    return {
        "case_id": case_id,
        "key": f"{case_id}:tiny",
        "status": status,
        "efficiency": efficiency,
        "local_efficiency": efficiency * 1.1,
        "profile": profile,
        **({"versions": versions} if versions else {}),
        "commit": commit,
        "written": written,
        "oversubscribed": False,
        "resources": {"wire": {"bytes_per_step": wire}},
        "result": {
            "throughput": 1000 * efficiency,
            "losses": [2.0, 1.5],
            "ranks": [{"peak_memory_bytes": memory}, {"peak_memory_bytes": memory * 0.99}],
        },
    }


def series_runs(
    tmp_path: Path,
    n: int = 20,
    *,
    slow_from: int | None = None,
    grow_from: int | None = None,
    cases: tuple[str, ...] = ("ddp-cnn-1x2", "fsdp-cnn-1x2"),
) -> list[Path]:
    """n nightly runs with ~3% noise; ddp-cnn-1x2 loses 15% efficiency from run ``slow_from`` on and
    fsdp-cnn-1x2 gains 20% peak memory from run ``grow_from`` on."""
    rng = np.random.default_rng(0)
    dirs = []
    for i in range(n):
        made = []
        for cid in cases:
            eff = 0.8 * (1 + 0.03 * rng.standard_normal())
            if cid == "ddp-cnn-1x2" and slow_from is not None and i >= slow_from:
                eff *= 0.85
            mem = 400e6 * (1 + 0.005 * rng.standard_normal())
            if cid == "fsdp-cnn-1x2" and grow_from is not None and i >= grow_from:
                mem *= 1.2
            made.append(case(cid, eff, memory=mem, commit=f"commit{i:02d}", written=1.8e9 + 86400 * i))
        dirs.append(write_run(tmp_path / f"nightly-{i:02d}", *made))
    return dirs


def add_all(db: Path | str, runs: list[Path]) -> None:
    done = run("history", "add", *runs, "--db", db)
    assert done.returncode == 0, done.stderr


NIGHTS = 64  # the drop at 60 has four nights after it: new, and more than the three a change point needs


def nightlies(
    tmp_path: Path, *, upgrade_at: int | None, drop_at: int, cases=("ddp-cnn-1x2", "fsdp-cnn-1x2")
) -> list[Path]:
    """NIGHTS nightlies, 2% noise; ddp-cnn-1x2 8% less efficient from ``drop_at``; torch 2.12.0 -> 2.13.0 (and
    DeepSpeed, recorded beside the profile, unchanged) from ``upgrade_at``."""
    rng = np.random.default_rng(7)
    dirs = []
    for i in range(NIGHTS):
        torch = "2.13.0" if upgrade_at is not None and i >= upgrade_at else "2.12.0" if upgrade_at else "2.13.0"
        made = []
        for cid in cases:
            eff = 0.8 * (1 + 0.02 * rng.standard_normal()) * (0.92 if cid == "ddp-cnn-1x2" and i >= drop_at else 1)
            made.append(
                case(
                    cid,
                    eff,
                    commit=f"commit{i:04d}",
                    written=1.8e9 + 86400 * i,
                    profile=f"cpu-test-2c-torch{torch}",
                    versions={"torch": torch, "deepspeed": "0.19.8"},
                )
            )
        dirs.append(write_run(tmp_path / f"nightly-{i:04d}", *made))
    return dirs
