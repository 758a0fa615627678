"""The gate's rounds as one run: every round's launches of a case in one judge record, written where ``compare`` finds it.

The judge sees every round's launches of a case as one record (``merge``), in launch order, exactly as one
session's relaunches would give them; a paired round's launches of a case count as one (``pooled``), as its 1x1
reference's already do. ``write`` puts the merged result files in ``<gate dir>/merged`` (``latest`` points there),
an A/B gate's base side in ``merged/base``, so ``python -m scalegate compare`` re-judges the gate's verdicts.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any, Sequence

from scalegate.contract import atomic
from scalegate.figures import ledger
from scalegate.judge import CaseRecord, duet_floors, gpu
from scalegate.judge.evidence import ALTERNATE, PAIRED, LaunchRecord, threads_of


@dataclasses.dataclass(frozen=True)
class Budgets:
    """The rounds a case may take (``GatePlan``): the gate's, a training script's in a paired gate, and a case's
    whose two jobs alternate whole (None: the gate's)."""

    rounds: int
    script: int | None = None
    alternate: int | None = None

    @property
    def most(self) -> int:
        return max(self.rounds, self.alternate or 0)

    def of(self, first: CaseRecord, in_duet: bool, alternate: bool) -> int:
        if self.script and in_duet and duet_floors.is_script(first):
            return self.script
        return self.alternate if self.alternate and alternate else self.rounds


def merge(rounds: list[list[dict[str, Any]]], budgets: Budgets) -> list[dict[str, Any]]:
    """Every case's result files of all rounds as one: launches and reference steps in round order (a duet round's
    launches pooled into one: ``pooled``), the judge's budget the case's own of ``budgets`` (a round's own session
    ran with a budget of one launch)."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for cases in rounds:
        for case in cases:
            by_key.setdefault(case["key"], []).append(case)
    merged = []
    for group in by_key.values():
        records = [
            CaseRecord.from_dict(c.get("record") or {}, f"result file of {c.get('case_id', '?')}") for c in group
        ]
        first = records[0]
        in_duet = any(launch.duet for r in records for launch in r.launches)
        alternate = any(launch.duet == ALTERNATE for r in records for launch in r.launches)
        own = budgets.of(first, in_duet, alternate)
        record = dataclasses.replace(
            first,
            launches=tuple(
                dataclasses.replace(
                    launch,
                    reference_step_times_s=r.reference_step_times_s,
                    reference_lengths=r.reference_lengths,
                    reference_duet=r.reference_duet,
                )
                for r in records
                for launch in pooled(r.launches)
            ),
            reference_step_times_s=tuple(t for r in records for t in r.reference_step_times_s),
            reference_lengths=tuple(n for r in records for n in r.reference_lengths),
            reference_launches=sum(r.reference_launches for r in records),
            problems=tuple(dict.fromkeys(p for r in records for p in r.problems)),
            failure=next((r.failure for r in records if r.failure), ""),
            conduct=dataclasses.replace(first.conduct, max_launches=own),
        )
        merged.append({**group[-1], "record": record.to_dict(), "launches": len(record.launches), "rounds": len(group)})
    return merged


def pooled(launches: Sequence[LaunchRecord]) -> tuple[LaunchRecord, ...]:
    """A duet round's launches of a case as one launch, as its 1x1 reference's already are: the judge reads a round
    as one estimate (judge/duet_pairs.py pairs launch n of the head with launch n of the base, by ``lengths``), so the
    round's one reference is not counted once per launch. Today's rounds keep their launches apart."""
    if len(launches) < 2 or not any(launch.duet for launch in launches):
        return tuple(launches)
    peaks = [launch.peak_memory_bytes for launch in launches]
    return (
        dataclasses.replace(
            launches[0],
            step_times_s=tuple(t for launch in launches for t in launch.step_times_s),
            lengths=tuple(len(launch.step_times_s) for launch in launches),
            pair_step_times_s=tuple(t for launch in launches for t in launch.pair_step_times_s),
            local_step_times_s=tuple(t for launch in launches for t in launch.local_step_times_s),
            final_loss=launches[-1].final_loss,
            peak_memory_bytes=tuple(map(max, zip(*peaks))) if len(set(map(len, peaks))) == 1 else peaks[0],
            duet=next((launch.duet for launch in launches if launch.duet != PAIRED), PAIRED),
            duet_threads=threads_of([launch.duet_threads for launch in launches]),
            gpu_state=gpu.pool([launch.gpu_state for launch in launches]),
            ledger=ledger.pool([launch.ledger for launch in launches]),
            cpu_wait=max((launch.cpu_wait for launch in launches if launch.cpu_wait is not None), default=None),
            steal=max((launch.steal for launch in launches if launch.steal is not None), default=None),
        ),
    )


def write(
    gate_dir: Path,
    cases: list[dict[str, Any]],
    parity_run: Path | None,
    results_dir: Path,
    base_cases: list[dict[str, Any]] | None = None,
    base: dict[str, str] | None = None,
) -> Path:
    """The gate's run directory: the merged cases, parity's results, an A/B run's base commit's merged cases in
    ``base/`` (with ``base/commit.json``), and ``results_dir/latest`` pointing at it."""
    merged_dir = gate_dir / "merged"
    merged_dir.mkdir(parents=True, exist_ok=True)
    for case in cases:
        atomic.write_json(merged_dir / f"{case['case_id']}.json", case)
    if base_cases is not None:
        (merged_dir / "base").mkdir(exist_ok=True)
        for case in base_cases:
            atomic.write_json(merged_dir / "base" / f"{case['case_id']}.json", case)
        (merged_dir / "base" / "commit.json").write_text(json.dumps(base or {}, indent=2) + "\n")
    if parity_run is not None and (parity_run / "parity").is_dir():
        shutil.copytree(parity_run / "parity", merged_dir / "parity", dirs_exist_ok=True)
    (merged_dir / "rounds.json").write_text(
        json.dumps(sorted(str(p) for p in gate_dir.glob("round-*/**/latest")), indent=2) + "\n"
    )
    latest = results_dir / "latest"
    if latest.is_symlink() or latest.exists():
        latest.unlink()
    latest.symlink_to(merged_dir.resolve(), target_is_directory=True)
    return merged_dir
