"""What the duet's estimate is held to: sigma's floors from recorded A/A rounds, the trim, the sequential design.

A round's pairs cannot see a launch's own level, so sigma is never below the spread of recorded A/A rounds: the
profile's baseline's for the case (``record-baselines --duet-aa N``), else the floors measured on the 2-core VMs
(policy.py ``RECORDED_AA`` and its swap and alternate kin), kept by kind: a team's training script or a workload.
"""

from __future__ import annotations

import statistics
from typing import Sequence

from scalegate.judge import sequential
from scalegate.judge.evidence import CaseRecord
from scalegate.judge.outcome import Overrides
from scalegate.judge.references import efficiency_tolerance
from scalegate.policy import (
    MIN_ROUNDS,
    RECORDED_AA,
    RECORDED_AA_ALTERNATE,
    RECORDED_AA_ALTERNATE_LOCAL,
    RECORDED_AA_STEP_W,
    RECORDED_AA_SWAP,
    SCRIPT_TRIM,
    TRIM,
)
from scalegate.record.baselines import BaselineFile


def is_script(record: CaseRecord) -> bool:
    return record.key.endswith(":script")


def kind_of(record: CaseRecord) -> str:
    """The kind the recorded floors and turns are kept by: "script" (a user's training script) or "workload"."""
    return "script" if is_script(record) else "workload"


def trim_of(record: CaseRecord) -> float:
    """The share of a round's units trimmed at each end for this case: ``SCRIPT_TRIM`` for a training script."""
    return SCRIPT_TRIM if is_script(record) else TRIM


def aa_floor(record: CaseRecord, baseline: BaselineFile | None, step_w: bool = False) -> tuple[float, str]:
    """Sigma's floor from A/A duets, and where it comes from: the spread the profile's baseline recorded for this case
    (``record-baselines --duet-aa N``), else ``RECORDED_AA``, fitted on the 2-core VMs. ``step_w``: the floor of the
    step time at W's test (``sigma_step_w``, ``RECORDED_AA_STEP_W``). BaselineError where the recorded value is
    malformed."""
    recorded = baseline.duet_aa(record.key) if baseline is not None else None
    if step_w and recorded is not None and recorded.sigma_step_w is not None:
        return recorded.sigma_step_w, recorded.describe() + " (step time at W)"
    if not step_w and recorded is not None:
        return recorded.sigma, recorded.describe()
    return measured_floor(kind_of(record), step_w)


def measured_floor(kind: str, step_w: bool = False, pairing: str = "duet") -> tuple[float, str]:
    """The floor measured on the 2-core VMs for ``kind`` ("workload" or "script") in ``pairing`` (the duet, "swap"
    or "alternate"): the efficiency's, or the step time at W's (benchmarks/duet_replay.py replays with it)."""
    if pairing in ("swap", "alternate"):
        efficiency, at_w = (RECORDED_AA_SWAP if pairing == "swap" else RECORDED_AA_ALTERNATE)[kind]
        return at_w if step_w else efficiency
    return (RECORDED_AA_STEP_W if step_w else RECORDED_AA)[kind]


def alternate_floor(record: CaseRecord, step_w: bool = False, local: bool = False) -> tuple[float, str]:
    """Sigma's floor in the alternate pairing: the spread of its recorded A/A rounds (``RECORDED_AA_ALTERNATE``);
    ``local``: of the efficiency read from each launch's same-launch local steps (``RECORDED_AA_ALTERNATE_LOCAL``)."""
    if local and not step_w:
        return RECORDED_AA_ALTERNATE_LOCAL
    return measured_floor(kind_of(record), step_w, "alternate")


def swap_floor(record: CaseRecord, step_w: bool = False) -> tuple[float, str]:
    """Sigma's floor in the swap pairing: the spread of its recorded A/A rounds (``RECORDED_AA_SWAP``)."""
    return measured_floor(kind_of(record), step_w, "swap")


def sigma_of(logs: Sequence[float], ses: Sequence[float], recorded: tuple[float, str]) -> tuple[float, str]:
    """The sequential test's spread of one round's log ratio, and where it comes from: the rounds' block means,
    never below ``recorded`` (recorded A/A duet rounds: a launch's own level, which no round's pairs can see) nor
    the rounds' own spread. benchmarks/duet_replay.py replays recorded rounds through it."""
    sigma, source = statistics.median(ses), "measured: block means of the rounds' duet pairs"
    floor, where = recorded
    if floor > sigma:
        sigma, source = floor, f"measured: {where}, above the rounds' block means"
    if len(logs) >= 2 and statistics.stdev(logs) > sigma:
        sigma, source = statistics.stdev(logs), f"measured: the {len(logs)} rounds' own spread, above their block means"
    return sigma, source


def rounds_design(
    record: CaseRecord, baseline: BaselineFile | None, overrides: Overrides, sigma_floor: float
) -> sequential.Design:
    """The sequential test over an A/B gate's rounds, duet or not: the case's drop to catch and budget, both
    verdicts after ``MIN_ROUNDS`` rounds."""
    conduct = record.conduct
    return sequential.Design(
        detect=efficiency_tolerance(record, overrides, baseline),
        alpha=conduct.alpha,
        beta=conduct.beta,
        max_launches=conduct.max_launches,
        min_launches_regressed=MIN_ROUNDS,
        min_launches_ok=MIN_ROUNDS,
        sigma_floor=sigma_floor,
    )


def speed_drop(step_time: float) -> float:
    """A step time ``step_time`` slower, as the drop in speed (base/head step time) the step-time test detects."""
    return 1 - 1 / (1 + step_time)
