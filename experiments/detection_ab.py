"""The A/B PR gate (``python -m scalegate gate --base REF``) as a user runs it, on a throwaway repository.

    .venv/bin/python -m experiments.detection --help        # collect --ab: the rounds benchmarks.ab_replay replays
    .venv/bin/python -m experiments.detection_ab --runs 5 --out results/gate-runs-ab.jsonl

It copies this checkout into a repository of two commits, the base and a head that makes DDP's step wait
``--slow-ms`` on the host (a synchronous check a PR could add), and runs the whole command: A/A (``--base`` = the
head itself) and the slowed head against its base, alternating, with exit codes, verdicts, rounds and wall times.
The replay of collected rounds through the gate's judge is a tool: ``python -m benchmarks.ab_replay``.
Timing: run it with nothing else on the machine; the load average is recorded with every run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.repos import checkout_repo, commit_change, slow_commit


def _throwaway(work: Path, slow_ms: float) -> tuple[Path, str, str]:
    """A copy of this checkout as a repository of two commits: (its path, the base's hash, the slowed head's)."""
    repo = work / "repo"
    if repo.exists():
        subprocess.run(["rm", "-rf", str(repo)], check=True)
    base = checkout_repo(repo)
    return repo, base, commit_change(repo, f"head: DDP's step waits {slow_ms:g} ms on the host", slow_commit(slow_ms))


def gate_runs(args: argparse.Namespace) -> None:
    work = Path(args.work).resolve()
    repo, base, slow = _throwaway(work, args.slow_ms)
    conditions = [("A/A (head = base)", base, base), (f"head: DDP step +{args.slow_ms:g} ms", slow, base)]
    for run in range(args.runs):
        for label, head, against in conditions if run % 2 == 0 else conditions[::-1]:
            subprocess.run(["git", "checkout", "-q", head], cwd=repo, check=True)
            started = time.perf_counter()
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "scalegate",
                    "gate",
                    "--base",
                    against,
                    "--results-dir",
                    str(work / "gate"),
                    "--json",
                    str(work / "gate.json"),
                    *args.pytest_args,
                ],
                cwd=repo,
                capture_output=True,
                text=True,
            )
            wall = time.perf_counter() - started
            data = json.loads((work / "gate.json").read_text()) if done.returncode in (0, 1) else {}
            row = {
                "run": run,
                "condition": label,
                "exit": done.returncode,
                "wall_s": wall,
                "load1": os.getloadavg()[0],
                "time": time.time(),
                "cases": {c["case_id"]: [c["status"], c["launches"], c.get("delta")] for c in data.get("cases", [])},
                "parity": data.get("parity", []),
                "rounds": done.stdout.count("gate: round "),
            }
            with Path(args.out).open("a") as handle:
                handle.write(json.dumps(row) + "\n")
            print(
                f"run {run} {label}: exit {done.returncode}, {wall:.0f}s, {row['rounds']} rounds, {row['cases']}",
                flush=True,
            )
            if done.returncode not in (0, 1):
                print(done.stdout[-3000:], done.stderr[-3000:], flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.detection_ab",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--slow-ms", type=float, default=3.0, help="host wait added to every DDP step (default: 3 ms)")
    parser.add_argument("--out", default="results/gate-runs-ab.jsonl")
    parser.add_argument("--work", default="results/gate-runs-ab")
    parser.add_argument("pytest_args", nargs="*", help="passed to the gate after `--`")
    gate_runs(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
