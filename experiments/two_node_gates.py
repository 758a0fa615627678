"""Whole A/B gates across two real SLURM nodes (slurm/two-node-cluster.sh), A/A and a slowed head, every round kept.

    python -m experiments.two_node_gates --runs 3 --out experiments/data/two-node/gates.jsonl

Builds the two-node cluster (and stops it after), copies this checkout into a throwaway repository
(tests/repos.py ``checkout_repo``), runs ``--runs`` A/A gates (``--base HEAD``), then commits tests/repos.py's
``slow_commit(--slow-ms)`` (that much more in each DDP forward: the 2x1 step slower, 1x1 unchanged) and runs
``--slowed-runs`` gates against it. Each gate is tests/repos.py's ``srun_gate_command``, as tests/test_slurm.py runs
it (``srun -N2 --ntasks-per-node=1 python -m scalegate gate ... -k "ddp-cnn-2x1 or single-cnn-1x1"``) with the
gate's default steps. One JSON line a gate: its
verdict, wall, load average at the start and every paired round as ``experiments/duet_aa.py`` reads them, which
``python -m benchmarks.duet_replay --data FILE`` replays. Timing: run it with nothing else on the machine, and edit
nothing under harness/ meanwhile (the gates import this checkout's scalegate).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from experiments.duet_aa import rounds_of
from tests.repos import checkout_repo, commit_change, outside_slurm_env, slow_commit, srun_gate_command

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = str(ROOT / "slurm" / "two-node-cluster.sh")
NOTE = "two real SLURM nodes (slurm/two-node-cluster.sh), ddp-cnn-2x1, the gate's defaults"


def gate(repo: Path, base: str, out: Path, slow_ms: float, run: int) -> dict:
    command = srun_gate_command(CLUSTER, repo, base, out, steps=None)  # the gate's own default steps
    load, started = os.getloadavg()[0], time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200, env=outside_slurm_env())
    wall = time.monotonic() - started
    out.with_suffix(".log").write_text(done.stdout + done.stderr)
    table = out.with_suffix(".md").read_text() if out.with_suffix(".md").is_file() else ""
    rows = [line for line in table.splitlines() if line.startswith("| `ddp-cnn-2x1")]  # the timed table's is last
    last = rows[-1].rsplit("|", 2)[-2] if rows else ""
    verdict = next((v for v in ("regressed", "noisy", "ok") if v in last), "other")
    gates = sorted(out.glob("gate-*"))
    cpus = os.environ.get("SLURM_TWO_NODE_CPUS", "1")  # the CPUs each node offers SLURM (two-node-cluster.sh)
    note = NOTE + (f"; {cpus} CPUs a node" if cpus != "1" else "")
    note += f"; slowed: {slow_ms:g} ms more in each DDP forward" if slow_ms else ""
    return {
        "kind": "two-node",
        "slow_ms": slow_ms,
        "strategy": "ddp",
        "run": run,
        "note": note,
        "load": load,
        "wall_s": round(wall, 1),
        "exit": done.returncode,
        "verdicts": {"ddp-cnn-2x1": verdict},
        "rounds": rounds_of(gates[-1]) if gates else [],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3, help="A/A gates")
    p.add_argument("--slowed-runs", type=int, default=None, help="gates against the slowed head (default: --runs)")
    p.add_argument("--slow-ms", type=float, default=10.0, help="the slowed head's extra wait in each DDP forward")
    p.add_argument("--out", type=Path, default=ROOT / "experiments" / "data" / "two-node" / "gates.jsonl")
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="two-node-gates-"))
    subprocess.run([CLUSTER, "start"], check=True, capture_output=True, text=True)
    try:
        repo = work / "repo"
        checkout_repo(repo)
        slowed = a.runs if a.slowed_runs is None else a.slowed_runs
        plan = [("HEAD", 0.0)] * a.runs + [("HEAD~1", a.slow_ms)] * slowed
        for n, (base, slow) in enumerate(plan):
            if n == a.runs:
                commit_change(repo, f"head: {a.slow_ms:g} ms more in each DDP forward", slow_commit(a.slow_ms))
            row = gate(repo, base, work / f"gate{n}", slow, n if n < a.runs else n - a.runs)
            with a.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(
                f"{n + 1}/{len(plan)}: {row['verdicts']}, {len(row['rounds'])} rounds, {row['wall_s']:.0f} s, "
                f"load {row['load']:.2f}",
                flush=True,
            )
    finally:
        subprocess.run([CLUSTER, "stop"], capture_output=True, text=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
