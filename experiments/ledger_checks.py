"""The collective ledger, checked on real launches: A/A launches repeat it, and its cross-node bytes match the links'.

    python -m experiments.ledger_checks aa [--launches 20]              # the canaries and the example script
    python -m experiments.ledger_checks crosscheck [--topologies 2x1 2x2] # emulated nodes: ledger vs veth counters
    python -m experiments.ledger_checks crosscheck --slurm               # the same on slurm/two-node-cluster.sh

``aa`` runs each canary (ddp, fsdp, ZeRO-2 on cnn 1x2) and the example script (ddp and fsdp at 1x2) as one session
with ``--scaling-launches N`` and compares every launch's ledger with the first's (figures/ledger.py rows, and the
exact verdict judge/ledger.py gives each pair). ``crosscheck`` runs each strategy on two nodes, where every node's
link counter (its veth's tx bytes over the measured window) counts exactly the bytes that leave it, and compares
their sum with the ledger's bytes across nodes. Byte counts do not depend on the machine's load; the wall times it
prints do. Each writes its rows as JSON lines to ``--out`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scalegate.judge import ledger as exact
from scalegate.judge.evidence import CaseRecord

ROOT = Path(__file__).resolve().parents[1]
CANARIES = ("ddp", "fsdp", "deepspeed-zero2")
CROSS = {"2x1": ("ddp", "fsdp", "deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3"), "2x2": ("ddp", "fsdp", "deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3", "hsdp")}  # fmt: skip


def _pytest(cwd: Path, results: Path, *args: str, srun: list[str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SCALEGATE_RUN_ID", "PYTEST_ADDOPTS")}
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--scaling-results-dir", str(results), *args]
    return subprocess.run([*(srun or []), *cmd], cwd=cwd, env=env, capture_output=True, text=True)


def _cases(results: Path) -> dict[str, dict[str, Any]]:
    latest = results / "latest"
    return {p.stem: json.loads(p.read_text()) for p in latest.glob("*.json") if p.name != "run.json"}


def aa(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "train_script"
        shutil.copytree(ROOT / "examples" / "train_script", project, ignore=shutil.ignore_patterns("results"))
        runs = [
            ("canaries", ROOT, ["scaling_tests/test_scaling.py", "--scaling-models", "cnn", "--scaling-strategies",
                                ",".join(CANARIES), "--scaling-topologies", "1x2"]),
            ("example script", project, []),
        ]  # fmt: skip
        for name, cwd, selection in runs:
            started = time.monotonic()
            load = os.getloadavg()[0]
            done = _pytest(cwd, Path(tmp) / name, *selection, "--scaling-launches", str(args.launches),
                           "--scaling-steps", str(args.steps), "--scaling-warmup", "5")  # fmt: skip
            print(f"{name}: pytest exited {done.returncode} in {time.monotonic() - started:.0f} s", flush=True)
            for case_id, case in sorted(_cases(Path(tmp) / name).items()):
                if case_id.endswith("-1x1"):
                    continue
                rows.append(_aa_row(name, case, load))
    return rows


def _aa_row(name: str, case: dict[str, Any], load: float) -> dict[str, Any]:
    record = CaseRecord.from_dict(case["record"])
    ledgers = [launch.ledger for launch in record.launches]
    first = ledgers[0]
    verdicts = [exact.judge([other], [first], "launch 1", 0.0, case["case_id"]).state for other in ledgers[1:]]
    return {
        "set": name,
        "case": case["case_id"],
        "launches": len(ledgers),
        "steady": sum(bool(led.get("steady")) for led in ledgers),
        "identical": sum(led.get("rows") == first.get("rows") for led in ledgers),
        "exact_alarms": sum(state == exact.REGRESSED for state in verdicts),
        "states": sorted(set(verdicts)),
        "rows": first.get("rows"),
        "load": round(load, 2),
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }


def crosscheck(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    # each SLURM node of slurm/two-node-cluster.sh is a network namespace whose eth0 carries exactly its traffic:
    # the ranks count it at their window's edges as emulated nodes' do (measure/wire.py)
    srun = [
        "slurm/two-node-cluster.sh",
        "run",
        "env",
        "SCALEGATE_WIRE_IFACE=eth0",
        "srun",
        "-N2",
        "--ntasks-per-node=1",
    ]
    srun = srun if args.slurm else None
    for topology in args.topologies:
        strategies = ",".join(s for s in CROSS[topology] if s in args.strategies)
        with tempfile.TemporaryDirectory(dir=ROOT if args.slurm else None) as tmp:
            load = os.getloadavg()[0]
            done = _pytest(ROOT, Path(tmp), "scaling_tests/test_scaling.py", "--scaling-models", "cnn",
                           "--scaling-strategies", strategies, "--scaling-topologies", topology, "--scaling-steps",
                           str(args.steps), "--scaling-warmup", "5", srun=srun)  # fmt: skip
            print(f"{topology}: pytest exited {done.returncode}", flush=True)
            if done.returncode not in (0, 1):
                print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
            for case_id, case in sorted(_cases(Path(tmp)).items()):
                if case_id.endswith("-1x1"):
                    continue
                resources = case.get("resources") or {}
                wire, led = resources.get("wire") or {}, resources.get("ledger") or {}
                counted, cross = wire.get("bytes_per_step"), led.get("cross")
                rows.append(
                    {
                        "where": "two SLURM nodes" if args.slurm else "emulated nodes",
                        "case": case_id,
                        "counter": counted,
                        "counter_source": wire.get("source"),
                        "ledger_cross": cross,
                        "ledger_intra": led.get("intra"),
                        "ratio": round(counted / cross, 4) if counted and cross else None,
                        "rows": led.get("rows"),
                        "load": round(load, 2),
                        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                    }
                )
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    if rows and "identical" in rows[0]:
        head = (
            "| set | case | launches | steady | identical to launch 1 | exact false alarms |\n|---|---|--:|--:|--:|--:|"
        )
        body = [f"| {r['set']} | {r['case']} | {r['launches']} | {r['steady']} | {r['identical']} | {r['exact_alarms']} |" for r in rows]  # fmt: skip
    else:
        head = "| where | case | link counters MB/step | ledger across nodes MB/step | counters / ledger |\n|---|---|--:|--:|--:|"
        body = [f"| {r['where']} | {r['case']} | {_mb(r['counter'])} | {_mb(r['ledger_cross'])} | {r['ratio'] or '-'} |" for r in rows]  # fmt: skip
    return "\n".join([head, *body])


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    one = sub.add_parser("aa", help="A/A launches of the canaries and the example script")
    one.add_argument("--launches", type=int, default=20)
    one.add_argument("--steps", type=int, default=20)
    two = sub.add_parser("crosscheck", help="the ledger's bytes across nodes against the nodes' link counters")
    two.add_argument("--topologies", nargs="+", default=["2x1", "2x2"], choices=sorted(CROSS))
    two.add_argument("--strategies", nargs="+", default=sorted(set(CROSS["2x2"])))
    two.add_argument("--steps", type=int, default=10)
    two.add_argument("--slurm", action="store_true", help="on slurm/two-node-cluster.sh's two nodes (started)")
    for p in (one, two):
        p.add_argument("--out", type=Path, default=None, help="append the rows as JSON lines here")
    args = parser.parse_args(argv)
    rows = aa(args) if args.what == "aa" else crosscheck(args)
    if args.out:
        with args.out.open("a") as out:
            for row in rows:
                out.write(json.dumps(row) + "\n")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
