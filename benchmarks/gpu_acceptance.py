"""The GPU acceptance run from a fresh clone, in one command: set up, run every GPU phase, write the report.

    python3 -m benchmarks.gpu_acceptance                         # ./setup.sh, then selftest --gpu (10 minutes)
    python3 -m benchmarks.gpu_acceptance --no-setup              # .venv is ready: the run alone
    python3 -m benchmarks.gpu_acceptance -- --budget-s 300 --models cnn   # after --: selftest's own options

The setup is the repository's own ``./setup.sh``: on a machine whose ``nvidia-smi`` lists a GPU it installs the
CUDA build of the pinned torch (torch==2.13.0) that the driver runs (harness/scalegate/plan/cuda_wheel.py chooses it from
the driver's CUDA version), DeepSpeed without building its ops, and the suite; an installed torch is kept. Then
``.venv/bin/python -m scalegate selftest --gpu`` (harness/scalegate/cli/selftest.py) runs the phases and writes
``docs/gpu/<device>-<date>.md`` with its raw JSON: commit both.

This file imports nothing but the standard library: it runs before anything is installed. Exit codes:
selftest's (0 passed, 1 a failure, 2 no CUDA device or bad arguments); 2 with one line where ``nvidia-smi`` lists
no GPU; setup.sh's own where the setup fails.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


def gpu_listed() -> str:
    """Why this machine has no GPU to test ("" when ``nvidia-smi -L`` lists one)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "nvidia-smi is not installed"
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"nvidia-smi -L failed: {exc}"
    if done.returncode != 0 or "GPU" not in done.stdout:
        return f"nvidia-smi -L lists no GPU (exit {done.returncode})"
    return ""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 -m benchmarks.gpu_acceptance",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--no-setup", action="store_true", help="skip ./setup.sh: .venv is already set up")
    p.add_argument("selftest_args", nargs="*", help="after --: options of `python -m scalegate selftest --gpu`")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    why = gpu_listed()
    if why:
        print(f"gpu_acceptance: no GPU here ({why}); nothing to verify", file=sys.stderr)
        return 2
    if not args.no_setup:
        done = subprocess.run(["bash", str(ROOT / "setup.sh")], cwd=ROOT)
        if done.returncode != 0:
            return done.returncode
    if not VENV_PYTHON.is_file():
        print(f"gpu_acceptance: {VENV_PYTHON} does not exist\nHINT: run without --no-setup", file=sys.stderr)
        return 2
    command = [str(VENV_PYTHON), "-m", "scalegate", "selftest", "--gpu", *args.selftest_args]
    return subprocess.run(command, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
