"""Whole A/B gates of the four code changes the collective ledger names: what each gate said, and its wall.

    python -m experiments.ledger_gates [--where node slurm] [--kinds script canary] [--out FILE]

Each change (tests/repos.py ``TEAM_CHANGES``, ``CANARY_CHANGES``) is the head commit of a throwaway repository, a
team's script (tests/assets/ledger_team) or this checkout's canaries, gated with ``gate --base HEAD~1`` as
tests/repos.py ``ledger_gate`` builds it: on this node with no namespace counter (``SCALEGATE_NO_NETNS=1``), and
across slurm/two-node-cluster.sh's two nodes (started) under ``srun -N2``. Wall times depend on the machine: run it
with nothing else running, and keep the load average it prints.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from tests.repos import CANARY_CHANGES, canary_repo, ledger_gate, outside_slurm_env, team_repo

CLUSTER = str(Path(__file__).resolve().parents[1] / "slurm" / "two-node-cluster.sh")


def gate(kind: str, change: str, where: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        repo = (team_repo if kind == "script" else canary_repo)(Path(tmp) / "repo", change)
        out = Path(tmp) / "gate"
        command, case = ledger_gate(kind, change, repo, out, CLUSTER if where == "slurm" else None)
        load, started = os.getloadavg()[0], time.monotonic()
        done = subprocess.run(command, cwd=repo, capture_output=True, text=True, env=outside_slurm_env())
        wall = time.monotonic() - started
        cases = json.loads(Path(f"{out}.json").read_text())["cases"] if Path(f"{out}.json").is_file() else []
        found = next((c for c in cases if c["case_id"] == case), {})
        return {
            "kind": kind,
            "change": change,
            "where": where,
            "case": case,
            "exit": done.returncode,
            "status": found.get("status"),
            "rounds": found.get("launches"),
            "collectives": (found.get("collectives") or {}).get("state"),
            "lines": (found.get("collectives") or {}).get("lines"),
            "wall_s": round(wall, 1),
            "load": round(load, 2),
            "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            **({} if found else {"said": (done.stdout + done.stderr)[-2000:]}),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--where", nargs="+", default=["node", "slurm"], choices=["node", "slurm"])
    parser.add_argument("--kinds", nargs="+", default=["script", "canary"], choices=["script", "canary"])
    parser.add_argument("--changes", nargs="+", default=list(CANARY_CHANGES), choices=list(CANARY_CHANGES))
    parser.add_argument("--out", type=Path, default=None, help="append each gate's row as a JSON line here")
    args = parser.parse_args(argv)
    print("| where | kind | change | exit | verdict | rounds | collectives | wall s | load |")
    print("|---|---|---|--:|---|--:|---|--:|--:|")
    for where in args.where:
        for kind in args.kinds:
            for change in args.changes:
                row = gate(kind, change, where)
                if args.out:
                    with args.out.open("a") as out:
                        out.write(json.dumps(row) + "\n")
                print(f"| {where} | {kind} | {change} | {row['exit']} | {row['status']} | {row['rounds']} | "
                      f"{row['collectives']} | {row['wall_s']} | {row['load']} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
