"""Where an A/A duet's mean log ratio comes from (it must lie within ±0.5%).

    python -m experiments.duet_bias --rounds 8 --layout gate      # as the gate runs: base beside, head here
    python -m experiments.duet_bias --rounds 8 --layout nested    # base nested in the run directory (23 deeper)
    python -m experiments.duet_bias --rounds 8 --layout swapped   # the worktree's side called "head"
    python -m experiments.duet_bias --rounds 8 --layout same      # both sides run in one tree
    python -m experiments.duet_bias --rounds 8 --layout equal     # the base's worktree beside, at a path as long
    python -m experiments.duet_bias --rounds 8 --layout sibling   # beside, at a path as long as the gate's
    python -m experiments.duet_bias --rounds 8 --kind script --steps 600   # the example script in its own repo
    python -m experiments.duet_bias --extra "--scaling-duet-threads free"   # gloo's threads free (auto binds them)
    python -m experiments.duet_bias --kind script --steps 600 --extra "--scaling-reference-launches 4"
    python -m experiments.duet_bias --kind script --steps 150 --turn-steps 150   # turns of a launch's whole steps
    python -m experiments.duet_bias --pairing swap --turn-steps 25   # the swap pairing (the idle job swapped out)
    python -m experiments.duet_bias --layout same --pad-base 23     # one tree, the base's environment 46 bytes larger

One A/A duet of ``ddp-cnn-1x2`` (and its 1x1 reference) for a fixed number of rounds, driven by the gate's own
``gate.rounds.run`` and coordinator, in a throwaway copy of this checkout. Where the head's step time at W and at
1x1 keeps one sign across layouts, the bias follows the side's name (its place in the turn order, which session
starts first); where it flips with ``swapped`` and vanishes with ``same``, it follows the tree (paths, environment
size). Each round's ``d_1``, ``d_w`` (head/base log ratios) go to ``--out``. Timing: nothing else running.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.duet_estimators import raw_row
from experiments.duet_aa import canary as with_single  # as the whole gates select: single-cnn-1x1 in round 1 too
from experiments.duet_aa import script_repo
from scalegate import policy
from scalegate.gate import merge, pairing, rounds, worktree
from scalegate.gate.project import Project
from scalegate.gate.sessions import Sessions
from scalegate.gate.sides import Side
from scalegate.judge import duet_floors, duet_pairs
from scalegate.judge.evidence import CaseRecord
from tests.repos import checkout_repo

ROOT = Path(__file__).resolve().parents[1]


def canary(strategy: str, model: str = "cnn", topology: str = "1x2") -> list[str]:
    """The canary case; another workload or topology (``--model resnet --topology 1x1`` on one GPU) is selected
    by name, and the matrix told to hold it."""
    picked = (
        ["--scaling-models", model, "--scaling-topologies", topology] if (model, topology) != ("cnn", "1x2") else []
    )
    return ["-k", f"{strategy}-{model}-{topology} and not parity", "--scaling-strategies", strategy, *picked]


def rounds_of(merged: dict[str, list[dict]], raw: Path | None = None) -> list[dict]:
    base = {c["key"]: c for c in merged["base"]}
    out = []
    for case in merged["head"]:
        head, other = CaseRecord.from_dict(case["record"]), CaseRecord.from_dict(base[case["key"]]["record"])
        for n, (h, b) in enumerate(zip(head.launches, other.launches), 1):
            found = duet_pairs.round_estimate(h, b, duet_floors.trim_of(head))
            if raw is not None:  # every step of both sides, for estimators tried afterwards
                with raw.open("a") as f:
                    f.write(json.dumps(raw_row(case["case_id"], n, h, b)) + "\n")
            if found is not None:
                logs = [math.log(x / y) for x, y in zip(h.reference_step_times_s, b.reference_step_times_s)]
                out.append(
                    {
                        "case": case["case_id"],
                        "round": n,
                        "d_w": found.at_w.mean,
                        "d_1": found.at_1.mean,
                        "se_w": found.at_w.se,
                        "w_launches": len(h.lengths) or 1,
                        "ref_launches": len(h.reference_lengths) or 1,
                        "se_1": found.at_1.se,
                        "d_1_even": statistics.median(logs[0::2]),  # pairs by the step's parity: the ABBA phase
                        "d_1_odd": statistics.median(logs[1::2]),
                        "t_1": statistics.median([*h.reference_step_times_s, *b.reference_step_times_s]),
                        **by_pair(h, b),
                    }
                )
    return out


def by_pair(h, b) -> dict:
    """The same round estimated pair by pair (``unit=1``: before policy.UNIT), to compare on the same launches."""
    at_w = duet_pairs.paired(h.step_times_s, b.step_times_s, unit=1)
    lengths = (h.reference_lengths, b.reference_lengths)
    at_1 = duet_pairs.paired(h.reference_step_times_s, b.reference_step_times_s, lengths, unit=1)
    return (
        {"d_w_pair": at_w.mean, "d_1_pair": at_1.mean, "se_w_pair": at_w.se, "se_1_pair": at_1.se}
        if at_w and at_1
        else {}
    )


@dataclass(frozen=True, kw_only=True)
class PaddedSide(Side):
    """A side whose sessions (and so their ranks) carry ``pad`` more bytes of environment: SCALEGATE_PAD=xxx..."""

    pad: int = 0

    def environment(self) -> dict[str, str]:
        return {**super().environment(), **({"SCALEGATE_PAD": "x" * self.pad} if self.pad else {})}


def one_run(a: argparse.Namespace) -> list[dict]:
    """``a.rounds`` rounds under one coordinator, in a fresh throwaway repository and base worktree."""
    with tempfile.TemporaryDirectory() as tmp:
        if a.kind == "canary":
            repo = Path(tmp) / "repo"
            checkout_repo(repo)
            chosen = with_single(a.strategy) if a.with_single else canary(a.strategy, a.model, a.topology)
            select, case = [*chosen, "--scaling-steps", str(a.steps)], f"[{a.strategy}-{a.model}-{a.topology}]"
        else:
            repo, _ = script_repo(Path(tmp), a.steps, 0.0, 0)
            select, case = ["-k", "ddp", "--scaling-steps", str(a.steps), "--scaling-warmup", "3"], "[ddp-mlp-1x2]"
        project = Project.find(repo)
        gate_dir = repo / "results" / "bias"
        empty = gate_dir / "no-baselines"
        settings = ("--scaling-tolerance", str(policy.AB_GATE_TOLERANCE))
        each_side = {"project": project, "settings": settings, "baselines": empty}
        # gate: where the gate puts it (worktree.base_tree: beside, a path as long as the repository's); nested: in
        # the run directory; equal: a sibling whose name is as long as the repository's ("base" beside "repo");
        # sibling: a sibling whose path is as long as the nested one (the path's length without the nesting)
        where = gate_dir / "base-tree"
        if a.layout in ("equal", "sibling"):
            length = len(repo.name) if a.layout == "equal" else len(str(where)) - len(str(repo.parent)) - 1
            where = repo.parent / "base".ljust(length, "-")
        tree = worktree.base_tree(repo, "HEAD", where) if a.layout == "gate" else worktree.checkout(repo, "HEAD", where)
        with tree as base:
            trees = {"swapped": (repo, base.path), "same": (repo, repo)}.get(a.layout, (base.path, repo))
            sides = [
                PaddedSide(name="base", tree=trees[0], pad=a.pad_base, **each_side),
                Side(name="head", tree=trees[1], **each_side),
            ]

            def undecided(merged: dict) -> list[str]:
                if a.partial is not None:  # the rounds so far: a command stopped at its limit keeps them
                    a.partial.write_text(json.dumps({"note": a.note, "rounds": rounds_of(merged)}) + "\n")
                return [case]

            with pairing.local(pairing.Chosen(a.pairing, "", turn_steps=a.turn_steps)) as paired:
                coordinator = paired.coordinator
                if a.first != "alternate":  # always the one side first (the experiment; the gate alternates)
                    round_started = coordinator.round_started
                    coordinator.round_started = lambda refused=None, first="": round_started(refused, first=a.first)
                args = [*select, *shlex.split(a.extra)]
                each = rounds.Rounds(
                    sides=sides,
                    args=args,
                    gate_dir=gate_dir,
                    undecided=undecided,
                    budgets=merge.Budgets(a.rounds),
                    sessions=Sessions(),
                    paired=paired,
                )
                merged = rounds.run(each).merged
        return [r for r in rounds_of(merged, a.raw) if f"[{r['case']}]" == case]  # not --with-single's single-cnn-1x1


def duet_threads(extra: str) -> str:
    """``--scaling-duet-threads`` as ``--extra`` sets it, else the default (contract/affinity.py)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--scaling-duet-threads", default="auto")
    return parser.parse_known_args(shlex.split(extra))[0].scaling_duet_threads


def main() -> int:
    from scalegate.contract.sections import PAIRINGS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument(
        "--layout",
        choices=("gate", "nested", "swapped", "same", "equal", "sibling"),
        default="gate",
        help="gate: where the gate checks the base out (beside the repository, at a path as long as its own); nested: "
        "in the run directory (the gate's until 2026-11-28); equal: beside, at a path of the same length, named "
        "base-; sibling: beside, at a path as long as the nested one",
    )
    p.add_argument("--out", type=Path, default=Path("/tmp/duet-bias.jsonl"))
    p.add_argument("--note", default="")
    p.add_argument("--raw", type=Path, help="also every step time of both sides, a round a line (JSON lines)")
    p.add_argument(
        "--partial",
        type=Path,
        help="after every round, the rounds so far to this file (on a GPU lease: a command stopped at its time "
        "limit still leaves them; the fifth GPU session lost two rounds without it)",
    )
    p.add_argument(
        "--first",
        choices=("alternate", "head", "base"),
        default="alternate",
        help="the side whose job turns first: by round as the gate does, or always the one named",
    )
    p.add_argument("--kind", choices=("canary", "script"), default="canary")
    p.add_argument(
        "--pairing",
        choices=[name for name in PAIRINGS if name != "rounds"],
        default="duet",
        help="step by step, whole jobs, or turns of --turn-steps with the idle job's state swapped out",
    )
    p.add_argument("--turn-steps", type=int, default=1, help="a duet's turn after a job's setup, in steps (gate's)")
    p.add_argument("--strategy", default="ddp", help="the canary's strategy: ddp, fsdp, deepspeed-zero2")
    p.add_argument("--model", default="cnn", help="the canary's workload (resnet: ~18 ms a step on one GPU)")
    p.add_argument("--topology", default="1x2", help="the canary's topology (1x1 on one GPU)")
    p.add_argument("--steps", type=int, default=100, help="measured steps (pairs) per launch")
    p.add_argument("--repeat", type=int, default=1, help="runs of --rounds each, every one in a fresh repository")
    p.add_argument("--with-single", action="store_true", help="single-cnn-1x1 in the first round too, as duet_aa")
    p.add_argument("--extra", default="", help="more pytest options for both sides' sessions, as one string")
    p.add_argument(
        "--pad-base",
        type=int,
        default=0,
        help="the base side's sessions get SCALEGATE_PAD, this many bytes long (with its name, its end and its pointer, "
        "23 bytes more): a longer path's size, without the path",
    )
    a = p.parse_args()
    load = os.getloadavg()[0]
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    os.environ.clear()
    os.environ.update(env)
    rows = []
    for run in range(a.repeat):
        for row in one_run(a):
            rows.append({**row, "run": run})
    wall = time.monotonic() - started
    record = {
        "kind": a.kind,
        "strategy": a.strategy if a.kind == "canary" else "ddp",
        "case": f"{a.strategy}-{a.model}-{a.topology}" if a.kind == "canary" else "ddp-mlp-1x2",
        "steps": a.steps,
        "duet_threads": duet_threads(a.extra),  # until 2026-11-27: "bind_threads", "all" where bound, "" free
        "layout": a.layout,
        "pad_base": a.pad_base,
        "pairing": a.pairing,
        "turn_steps": a.turn_steps,
        "first": a.first,
        "repeat": a.repeat,
        "with_single": a.with_single,
        "extra": a.extra,
        "load": load,
        "wall_s": round(wall, 1),
        "note": a.note,
        "rounds": rows,
    }
    with a.out.open("a") as f:
        f.write(json.dumps(record) + "\n")
    if not rows:
        print(f"no paired round of {record['case']} (too few steps for the estimate?), {wall:.0f} s")
        return 1
    d1, dw = [r["d_1"] for r in rows], [r["d_w"] for r in rows]
    sd = statistics.stdev if len(rows) > 1 else (lambda v: float("nan"))
    print(
        f"layout {a.layout}: {len(rows)} rounds, load {load:.2f}, {wall:.0f} s\n"
        f"  head/base at 1x1: mean {statistics.fmean(d1):+.2%} median {statistics.median(d1):+.2%} sd {sd(d1):.2%}\n"
        f"  head/base at W:   mean {statistics.fmean(dw):+.2%} median {statistics.median(dw):+.2%} sd {sd(dw):.2%}\n"
        f"  at 1x1 by pair parity: even {statistics.fmean(r['d_1_even'] for r in rows):+.2%} "
        f"odd {statistics.fmean(r['d_1_odd'] for r in rows):+.2%}\n"
        f"  efficiency:       mean {statistics.fmean(a - b for a, b in zip(d1, dw)):+.2%} sd {sd([a - b for a, b in zip(d1, dw)]):.2%}"
    )
    if all("d_w_pair" in r for r in rows):
        eff = [r["d_1_pair"] - r["d_w_pair"] for r in rows]
        print(
            f"  pair by pair:     at 1x1 sd {sd([r['d_1_pair'] for r in rows]):.2%}, at W sd "
            f"{sd([r['d_w_pair'] for r in rows]):.2%}, efficiency mean {statistics.fmean(eff):+.2%} sd {sd(eff):.2%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
