"""The duet's A/A and slowed-head runs, whole commands (docs/duet.md, docs/detection.md).

    python -m experiments.duet_aa --kind canary --runs 10            # gate --base HEAD on ddp-cnn-1x2, 10 times
    python -m experiments.duet_aa --kind script --runs 10            # the example script in its own repository
    python -m experiments.duet_aa --kind canary --slow-ms 1.5        # the head's DDP forward slowed (SLOW_COMMIT)
    python -m experiments.duet_aa --kind script --script-steps 150 --slowdown 0.0527   # a 5% drop, injected at W
    python -m experiments.duet_aa --kind script --extra-forward 8 -- --scaling-step-time-tolerance 0.05
    python -m experiments.duet_aa --strategy fsdp --runs 5 --layouts worktree,same   # base in a worktree / one tree
    python -m experiments.duet_aa --read results/gate/gate-...       # one gate run's rounds, as the table reads them

Each run is one real ``python -m scalegate gate --base ...`` in a throwaway repository (tests/repos.py); every
round of every case is written to ``--out`` (JSON lines: the per-round paired estimate at W and at 1x1, their
block-means SE, the verdict), and the table printed at the end gives the per-pair and per-round spreads, the A/A
mean log ratio and the verdicts. Timing: run it with nothing else on the machine; the load average is recorded
with every run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import duet_timeline
from benchmarks.duet_estimators import raw_row
from scalegate.judge import ab, duet_floors, duet_pairs
from scalegate.judge.evidence import CaseRecord
from scalegate.record import runfiles

ROOT = Path(__file__).resolve().parents[1]


def canary(strategy: str) -> list[str]:
    """One canary case of scalegate's own repository and its single-process reference."""
    return [
        "-k",
        f"({strategy}-cnn-1x2 or single-cnn-1x1) and not parity",
        "--scaling-strategies",
        f"single,{strategy}",
    ]


def rounds_of(gate_dir: Path, raw: Path | None = None) -> list[dict]:
    """Every duet round of every case of one gate run: its paired estimate; every step of both sides to ``raw``
    (benchmarks/duet_estimators.py reads it)."""
    merged = gate_dir / "merged"
    base = {c["key"]: c for c in runfiles.load_run(merged / "base")}
    out = []
    for case in runfiles.load_run(merged):
        if not case.get("record") or case["key"] not in base or not base[case["key"]].get("record"):
            continue
        head = CaseRecord.from_dict(case["record"])
        other = CaseRecord.from_dict(base[case["key"]]["record"])
        if head.world_size < 2:
            continue
        rounds = ab.pairs(head, other) or ab.classic_pairs(head, other)  # today's statistic, per round
        for n, (h, b) in enumerate(zip(head.launches, other.launches), 1):
            if raw is not None:
                with raw.open("a") as f:
                    f.write(json.dumps(raw_row(case["case_id"], n, h, b)) + "\n")
            found = duet_pairs.round_estimate(h, b, duet_floors.trim_of(head))
            if found is None:
                today = math.log(rounds[n - 1][0] / rounds[n - 1][1]) if n <= len(rounds) else None
                out.append({"case": case["case_id"], "round": n, "paired": False, "rounds_log": today})
                continue
            pair_logs = [math.log(x / y) for x, y in zip(h.step_times_s, b.step_times_s)]
            out.append(
                {
                    "case": case["case_id"],
                    "round": n,
                    "paired": True,
                    "d_w": found.at_w.mean,
                    "d_1": found.at_1.mean,
                    "eff_log": found.efficiency_log,  # the local efficiencies' where the alternate pairing read them
                    "local": found.local is not None,
                    "eff_alternated": found.at_1.mean - found.at_w.mean,
                    "se": found.se,
                    "se_w": found.at_w.se,
                    "pairs": found.at_w.pairs,
                    "pair_sd": statistics.stdev(pair_logs),
                }
            )
    return out


def script_repo(where: Path, steps: int, slowdown: float, extra_forward: int) -> tuple[Path, str]:
    """The example script in a repository of its own (its marker runs ``--max-steps={steps}``); with a head
    commit that slows it (``slowdown``: from outside its code, the harness's injected sleep that only the head's
    ranks at W see; ``extra_forward``: a real code change, a no-grad forward of that many samples each step, at W and
    1x1 alike). (repository, base revision)."""
    from tests.repos import commit_change, example_project, git

    repo = example_project(where)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the team's training script")
    if slowdown:
        ini = repo / "pytest.ini"
        ini.write_text(ini.read_text().replace("addopts = -ra", f"addopts = -ra --scaling-inject-slowdown {slowdown}"))
        git(repo, "commit", "-qam", "head: every distributed step slower (injected)")
        return repo, "HEAD~1"
    if extra_forward:
        change = (
            "train.py",
            "        optimizer.step()\n",
            f"        with torch.no_grad():  # the PR's train-accuracy probe\n"
            f"            model(inputs[:{extra_forward}])\n",
        )
        commit_change(repo, "head: a train-accuracy probe each step", change)
        return repo, "HEAD~1"
    return repo, "HEAD"


def run_gate(
    kind: str,
    where: Path,
    slow_ms: float,
    args: list[str],
    strategy: str = "ddp",
    script_steps: int = 30,
    slowdown: float = 0.0,
    extra_forward: int = 0,
    same_tree: bool = False,
) -> tuple[Path, dict[str, str], int]:
    from tests.repos import checkout_repo, commit_change, slow_commit

    repo = where / "repo"
    if kind == "canary":
        checkout_repo(repo)
        base = "HEAD"
        if slow_ms:
            commit_change(repo, "head: slower DDP forward", slow_commit(slow_ms))
            base = "HEAD~1"
        select = [*canary(strategy), "--scaling-steps", "100", "--scaling-warmup", "5"]
    else:
        repo, base = script_repo(where, script_steps, slowdown, extra_forward)
        select = ["-k", "ddp", "--scaling-steps", str(script_steps), "--scaling-warmup", "3"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    # same_tree: an A/A with both sides in the repository itself (`--base-python` alone: worktree.base_tree)
    against = ["--base-python", sys.executable] if same_tree else ["--base", base]
    cmd = [sys.executable, "-m", "scalegate", "gate", *against, "--json", "gate.json", *select, *args]
    done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=1800)
    verdicts = {c["case_id"]: c["status"] for c in json.loads((repo / "gate.json").read_text())["cases"]}
    return sorted((repo / "results" / "gate").glob("gate-*"))[-1], verdicts, done.returncode


def walls(gate_dir: Path) -> list[dict]:
    """Each duet round's wall, its turns' time, and its launches' median start-up (benchmarks/duet_timeline.py)."""
    duet_file = gate_dir / "merged" / "duet.json"
    data = json.loads(duet_file.read_text()) if duet_file.is_file() else {}
    if not data.get("rounds_s"):
        return []
    return [duet_timeline.summary(r) for r in duet_timeline.rounds(data)]


def table(rows: list[dict]) -> str:
    paired = [r for r in rows if r.get("paired")]
    today = [r["rounds_log"] for r in rows if r.get("rounds_log") is not None]
    if not paired:
        spread = f"{statistics.stdev(today):.2%}" if len(today) > 1 else "n/a"
        return (
            f"no duet rounds; today's rounds: {len(today)}, mean {statistics.fmean(today or [0]):+.2%}, spread {spread}"
        )
    effs = [r["eff_log"] for r in paired]
    lines = [
        f"rounds {len(paired)} (not paired: {len(rows) - len(paired)})",
        f"per-pair spread of ln(t_head/t_base) at W: median {statistics.median(r['pair_sd'] for r in paired):.1%}",
        f"per-round block-means SE: median {statistics.median(r['se'] for r in paired):.1%}",
        f"per-round efficiency log ratio: mean {statistics.fmean(effs):+.2%}, spread "
        f"{statistics.stdev(effs) if len(effs) > 1 else float('nan'):.2%}",
        f"step time at W: mean {statistics.fmean(r['d_w'] for r in paired):+.2%}; "
        f"at 1x1: mean {statistics.fmean(r['d_1'] for r in paired):+.2%}",
    ]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", choices=("canary", "script"), default="canary")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--slow-ms", type=float, default=0.0, help="the head's DDP forward slower by this (canary: ddp)")
    p.add_argument("--strategy", default="ddp", help="the canary's strategy: ddp, fsdp, deepspeed-zero2")
    p.add_argument("--read", type=Path, help="only read this gate run's directory")
    p.add_argument("--out", type=Path, default=ROOT / "experiments" / "data" / "detection-data-duet.jsonl")
    p.add_argument("--script-steps", type=int, default=30, help="script: measured steps (pairs) per launch")
    p.add_argument("--slowdown", type=float, default=0.0, help="script: the head's steps at W slower (injected)")
    p.add_argument("--extra-forward", type=int, default=0, help="script: the head adds a forward of N samples")
    p.add_argument("--note", default="", help="a label kept with every record (what changed since the last set)")
    p.add_argument("--raw", type=Path, help="also every step time of both sides, a round a line (JSON lines)")
    p.add_argument(
        "--layouts",
        default="worktree",
        help="worktree (--base, as a PR gate), same (both sides in one tree: --base-python alone, an A/A only), or "
        "worktree,same: the two in turn, run by run",
    )
    p.add_argument("gate_args", nargs="*", help="more arguments for the gate (e.g. --scaling-max-launches 4)")
    a = p.parse_args()
    if a.read:
        print(table(rounds_of(a.read)))
        return 0
    import tempfile

    layouts = a.layouts.split(",")
    if "same" in layouts and (a.slow_ms or a.slowdown or a.extra_forward):
        p.error("--layouts same is an A/A: both sides run the repository's one tree")
    every = []
    for n, layout in ((n, layout) for n in range(a.runs) for layout in layouts):
        load = os.getloadavg()[0]
        started = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            gate_dir, verdicts, code = run_gate(
                a.kind,
                Path(tmp),
                a.slow_ms,
                a.gate_args,
                a.strategy,
                a.script_steps,
                a.slowdown,
                a.extra_forward,
                same_tree=layout == "same",
            )
            rows = rounds_of(gate_dir, a.raw)
            timeline = walls(gate_dir)
        wall = time.monotonic() - started
        record = {
            "kind": a.kind,
            "slow_ms": a.slow_ms,
            **({"script_steps": a.script_steps} if a.kind == "script" else {}),
            **({"slowdown": a.slowdown} if a.slowdown else {}),
            **({"extra_forward": a.extra_forward} if a.extra_forward else {}),
            **({"gate_args": a.gate_args} if a.gate_args else {}),
            "strategy": a.strategy if a.kind == "canary" else "script",
            "run": n,
            **({"note": a.note} if a.note else {}),
            **({"layout": layout} if len(layouts) > 1 or layout != "worktree" else {}),
            "load": load,
            "wall_s": round(wall, 1),
            "exit": code,
            "verdicts": verdicts,
            "rounds": rows,
            **({"timeline": timeline} if timeline else {}),
        }
        with a.out.open("a") as f:
            f.write(json.dumps(record) + "\n")
        every += rows
        print(
            f"run {n + 1}/{a.runs} ({layout}): exit {code}, {len(rows)} rounds, {verdicts}, {wall:.0f} s, load {load:.2f}",
            flush=True,
        )
    print(table(every))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
