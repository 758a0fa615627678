"""The duet gate's sigma floor, measured on the user's profile (docs/duet.md, "A measured σ").

``record-baselines --duet-aa N`` stores each case's spread between A/A duet rounds in its baseline entry
(``duet_aa``); judge/duet_floors.aa_floor makes it the floor of the duet's sigma and names it in the verdict, else falls
back to ``RECORDED_AA``. A malformed value stops with the file, the case and a HINT.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from scalegate import policy
from scalegate.cli import record_duet
from scalegate.contract import SCHEMA_VERSION
from scalegate.contract.errors import BaselineError
from scalegate.judge import duet, duet_floors, duet_pairs
from scalegate.judge import metric as V
from scalegate.judge.evidence import CaseRecord, LaunchRecord
from scalegate.judge.outcome import Overrides
from scalegate.record import baselines
from tests.repos import checkout_repo

PROFILE = "cpu-test-2c-torch2.13.0"
KEY = "ddp-cnn-1x2:tiny"
RECORDED = {"sigma": 0.3, "rounds": 12, "provenance": {"date": "2026-11-30T10:00:00+00:00", "hostname": "box"}}


def _round(drop: float, jitter: float = 0.0) -> tuple[LaunchRecord, LaunchRecord]:
    """One duet round: the head's steps at W are ``drop`` slower than the base's, its 1x1 steps the same."""
    w = [0.010 * (1 + 0.05 * (i % 3)) for i in range(20)]
    one = [0.006 * (1 + 0.05 * (i % 2)) for i in range(20)]
    base = LaunchRecord(
        step_times_s=tuple(w), reference_step_times_s=tuple(one), duet="paired", reference_duet="paired"
    )
    head = LaunchRecord(
        step_times_s=tuple(t * (1 + drop + jitter * (-1) ** i) for i, t in enumerate(w)),
        reference_step_times_s=tuple(one),
        duet="paired",
        reference_duet="paired",
    )
    return head, base


def _records(*rounds: tuple[LaunchRecord, LaunchRecord]) -> tuple[CaseRecord, CaseRecord]:
    common = dict(case_id="ddp-cnn-1x2", key=KEY, profile=PROFILE, world_size=2, global_batch=64, steps=20, warmup=2)
    head = CaseRecord(**common, launches=tuple(h for h, _ in rounds))
    base = CaseRecord(**common, launches=tuple(b for _, b in rounds))
    return head, base


def _baseline(tmp_path: Path, entry: dict) -> baselines.BaselineFile | None:
    data = {"schema_version": SCHEMA_VERSION, "profile": PROFILE, "fingerprint": {}, "cases": {KEY: entry}}
    (tmp_path / f"{PROFILE}.json").write_text(json.dumps(data))
    return baselines.load(tmp_path, PROFILE)


def test_a_recorded_aa_spread_is_the_floor_and_the_verdict_names_it(tmp_path):
    """Two rounds that each read a 10% drop: below the 2.3% of RECORDED_AA that is a regression; with 30% recorded on
    this profile the same rounds are undecided, and the verdict says where its sigma came from."""
    head, base = _records(_round(0.11), _round(0.11))
    fallback = duet.timing(head, base, None, Overrides())
    assert fallback.status == V.REGRESSED, fallback.message
    assert "20 A/A duet rounds of ddp-cnn-1x2 recorded on the 2-core VMs" in fallback.message

    recorded = duet.timing(head, base, _baseline(tmp_path, {"duet_aa": RECORDED}), Overrides())
    assert recorded.status == V.NOISY, recorded.message
    assert "paired spread ±30.0%, measured: 12 A/A duet rounds recorded on this profile 2026-11-30" in recorded.message
    assert "2-core VMs" not in recorded.message


def test_aa_floor_reads_the_case_entry_and_falls_back_to_recorded_aa(tmp_path):
    head, _ = _records(_round(0.0))
    assert duet_floors.aa_floor(head, _baseline(tmp_path, {"duet_aa": RECORDED})) == (
        0.3,
        "12 A/A duet rounds recorded on this profile 2026-11-30",
    )
    # an entry without the field (every baseline file from before it), another case's field, or no file at all
    assert (
        duet_floors.aa_floor(head, _baseline(tmp_path, {"efficiency": {"value": 0.8, "tolerance": 0.1}}))
        == (policy.RECORDED_AA["workload"])
    )
    other = dict(head.__dict__, key="fsdp-cnn-1x2:tiny")
    assert (
        duet_floors.aa_floor(CaseRecord(**other), _baseline(tmp_path, {"duet_aa": RECORDED}))
        == policy.RECORDED_AA["workload"]
    )
    script = dict(head.__dict__, key="my-train-1x2:script")
    assert duet_floors.aa_floor(CaseRecord(**script), None) == policy.RECORDED_AA["script"]


def test_the_step_time_test_has_a_floor_of_its_own_recorded_or_measured_here(tmp_path):
    """``--scaling-step-time-tolerance``'s test on the step time at W: its floor is the profile's recorded
    ``sigma_step_w``, else ``RECORDED_AA_STEP_W`` (not the efficiency's, which carries a 1x1 launch's level)."""
    head, base = _records(_round(0.0))
    script = CaseRecord(**dict(head.__dict__, key="my-train-1x2:script"))
    assert duet_floors.aa_floor(head, None, step_w=True) == policy.RECORDED_AA_STEP_W["workload"]
    assert duet_floors.aa_floor(script, None, step_w=True) == policy.RECORDED_AA_STEP_W["script"]
    assert policy.RECORDED_AA_STEP_W["script"][0] < policy.RECORDED_AA["script"][0]
    # an entry recorded before the field: the efficiency's recorded sigma is not taken for the step time's
    assert (
        duet_floors.aa_floor(head, _baseline(tmp_path, {"duet_aa": RECORDED}), step_w=True)
        == (policy.RECORDED_AA_STEP_W["workload"])
    )
    with_w = _baseline(tmp_path, {"duet_aa": {**RECORDED, "sigma_step_w": 0.25}})
    assert duet_floors.aa_floor(head, with_w, step_w=True) == (
        0.25,
        "12 A/A duet rounds recorded on this profile 2026-11-30 (step time at W)",
    )

    # the verdict: a head 8% slower at W and at 1x1 alike (its efficiency holds) fails on the step time under the
    # 1.1% floor in two rounds, and stays undecided under a recorded 25%
    def uniform(h: LaunchRecord) -> LaunchRecord:
        return dataclasses.replace(
            h,
            step_times_s=tuple(t * 1.08 for t in h.step_times_s),
            reference_step_times_s=tuple(t * 1.08 for t in h.reference_step_times_s),
        )

    rounds = [_round(0.0), _round(0.0)]
    slow = _records(*[(uniform(h), b) for h, b in rounds])
    slow = tuple(
        CaseRecord(**dict(r.__dict__, conduct=dataclasses.replace(r.conduct, step_time_tolerance=0.05))) for r in slow
    )
    regressed = duet.timing(*slow, None, Overrides())
    assert regressed.status == V.REGRESSED and regressed.message.startswith("step speed at W"), regressed.message
    undecided = duet.timing(*slow, with_w, Overrides())
    assert undecided.status == V.NOISY and "±25.0%" in undecided.message, undecided.message


@pytest.mark.parametrize(
    "value, says",
    [
        ("0.02", "is str, expected an object"),
        ({"sigma": -0.1, "rounds": 5}, "sigma -0.1 is not a number in 0..1"),
        ({"sigma": "nan", "rounds": 5}, "sigma 'nan' is not a number in 0..1"),
        ({"sigma": float("nan"), "rounds": 5}, "sigma nan is not a number in 0..1"),
        ({"sigma": 0.02, "rounds": 1}, "rounds 1 is not a whole number >= 2"),
        ({"sigma": 0.02, "rounds": True}, "rounds True is not a whole number >= 2"),
        ({"sigma": 0.02, "rounds": 4, "provenance": "yesterday"}, "provenance 'yesterday' is not an object"),
        ({"sigma": 0.02, "rounds": 4, "sigma_step_w": 2}, "sigma_step_w 2 is not a number in 0..1"),
    ],
)
def test_a_malformed_recorded_spread_is_a_readable_error_with_a_hint(tmp_path, value, says):
    with pytest.raises(BaselineError) as found:
        _baseline(tmp_path, {"duet_aa": value})
    assert f"case '{KEY}' duet_aa {says}" in found.value.message and str(tmp_path) in found.value.message
    assert "record-baselines --duet-aa" in found.value.hint
    # a file built in memory (not through load) is checked where the judge reads it
    built = baselines.BaselineFile(
        path=tmp_path / "x.json", profile=PROFILE, fingerprint={}, cases={KEY: {"duet_aa": value}}
    )
    with pytest.raises(BaselineError, match="record-baselines|is not"):
        duet_floors.aa_floor(_records(_round(0.0))[0], built)


def test_the_recorded_field_survives_a_baseline_update_and_a_rerecording_leaves_the_rest(tmp_path):
    baselines.update(tmp_path, PROFILE, {"cpu": "x"}, {KEY: {"efficiency": {"value": 0.8, "tolerance": 0.1}}})
    baselines.set_field(tmp_path, PROFILE, {}, baselines.DUET_AA, {KEY: RECORDED})
    baselines.update(tmp_path, PROFILE, {"cpu": "x"}, {KEY: {"efficiency": {"value": 0.7, "tolerance": 0.1}}})
    found = baselines.load(tmp_path, PROFILE)
    assert found.cases[KEY]["efficiency"]["value"] == 0.7 and found.duet_aa(KEY).sigma == 0.3
    assert found.fingerprint == {"cpu": "x"}  # set_field keeps the file's fingerprint


def test_the_recorder_takes_the_spread_of_the_rounds_efficiency_ratio():
    rounds = [_round(0.0, 0.001), _round(0.05), _round(-0.03)]
    head, base = _records(*rounds)
    sigma, mean, n, step_w = record_duet.spread(head, base)
    logs = [duet_pairs.round_estimate(h, b).efficiency_log for h, b in rounds]
    assert n == 3 and sigma == pytest.approx(math.sqrt(sum((x - sum(logs) / 3) ** 2 for x in logs) / 2))
    assert sigma > 0.03 and mean == pytest.approx(sum(logs) / 3)
    at_w = [duet_pairs.round_estimate(h, b).at_w.mean for h, b in rounds]
    assert step_w == pytest.approx(math.sqrt(sum((x - sum(at_w) / 3) ** 2 for x in at_w) / 2))
    solo = LaunchRecord(step_times_s=(0.01,) * 20, reference_step_times_s=(0.006,) * 20, duet="solo: no partner")
    head, base = _records(rounds[0], (solo, rounds[1][1]))
    assert record_duet.spread(head, base) == "round 2 was not a duet (the head commit's case ran solo: no partner)"
    head, base = _records(*rounds)
    assert record_duet.spread(head, CaseRecord(**dict(base.__dict__, launches=base.launches[:2]))) == (
        "the head side ran 3 rounds, the base side 2"
    )
    # a head 4.5x slower at W and at 1x1 in one round only: the efficiency holds, the step time's spread is no timing
    h, b = _round(0.0)
    wild = dataclasses.replace(
        h,
        step_times_s=tuple(4.5 * t for t in h.step_times_s),
        reference_step_times_s=tuple(4.5 * t for t in h.reference_step_times_s),
    )
    head, base = _records((h, b), (wild, b))
    assert record_duet.spread(head, base) == "the rounds' step times at W spread 1.06 in log: not a timing measurement"


@pytest.mark.slow
@pytest.mark.nightly
def test_record_baselines_duet_aa_writes_each_cases_spread_with_its_provenance(tmp_path):
    """Two real A/A duet rounds of ddp-cnn-1x2 in a throwaway repository: the entry gains duet_aa (rounds 2, a
    spread, date, host, commit) and keeps its recorded efficiency; the gate's judge then names it."""
    repo = tmp_path / "repo"
    commit = checkout_repo(repo)
    bases = tmp_path / "baselines"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scalegate",
            "record-baselines",
            "--duet-aa",
            "2",
            "--results-dir",
            str(tmp_path / "results"),
            "--baseline-dir",
            str(bases),
            "-k",
            "(ddp-cnn-1x2 or single-cnn-1x1) and not parity",
            "--scaling-models",
            "cnn",
            "--scaling-strategies",
            "single,ddp",
            "--scaling-steps",
            "10",
            "--scaling-warmup",
            "2",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "record-baselines: round 1/2 done" in done.stdout and "record-baselines: round 2/2 done" in done.stdout
    assert "~ ddp-cnn-1x2:tiny: A/A duet spread" in done.stdout and "over 2 rounds" in done.stdout
    (written,) = bases.glob("*.json")
    entry = json.loads(written.read_text())["cases"]["ddp-cnn-1x2:tiny"]
    assert set(entry) == {"duet_aa"}  # no efficiency was recorded: the A/A record adds its field only
    aa = entry["duet_aa"]
    assert aa["rounds"] == 2 and 0 <= aa["sigma"] < 0.5 and 0 <= aa["sigma_step_w"] < 0.5
    assert aa["provenance"]["commit"].startswith(commit[:12]) and aa["provenance"]["hostname"]
    assert aa["provenance"]["date"][:4] >= "2026"
    assert "single-cnn-1x1:tiny" not in json.loads(written.read_text())["cases"]  # the reference has no duet verdict
    loaded = baselines.load(bases, written.stem)
    record = CaseRecord(
        case_id="ddp-cnn-1x2",
        key="ddp-cnn-1x2:tiny",
        profile=written.stem,
        world_size=2,
        global_batch=64,
        steps=10,
        warmup=2,
    )
    assert (
        duet_floors.aa_floor(record, loaded)[1]
        == f"2 A/A duet rounds recorded on this profile {aa['provenance']['date'][:10]}"
    )
