"""The A/B judge (harness/scalegate/judge/ab.py): a PR's launches against its base commit's, measured in the same run.

Synthetic records, as in tests/test_judge.py; the gate's real A/B runs (a throwaway repository whose head
commit slows DDP) are in tests/test_gate.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from scalegate.judge import CaseRecord, Conduct, Overrides, ab, judge
from scalegate.record import baselines
from tests.test_judge import KEY, PROFILE, launch, record


@pytest.fixture
def stored(tmp_path) -> baselines.BaselineFile:
    """A stored baseline from another machine: its level (0.75) is not what this one measures; its spread is lent."""
    entry = {
        "local_efficiency": {"value": 0.75, "tolerance": 0.25, "sigma": 0.02, "launches": 20},
        "bytes_per_step": {"value": 9.8e6, "tolerance": 0.05},
    }
    baselines.update(tmp_path, PROFILE, {}, {KEY: entry})
    return baselines.load(tmp_path, PROFILE)


def rounds(*values: float, **fields) -> CaseRecord:
    return record(*(launch(v, **fields) for v in values), conduct=Conduct(max_launches=8, tolerance=0.10))


def test_a_level_the_stored_baseline_calls_a_drop_is_no_change_against_the_base_commit(stored):
    """This VM reads 0.66 (-12% against the stored 0.75) on both commits: the stored gate would cry wolf."""
    head, base = rounds(0.66, 0.662), rounds(0.661, 0.659)
    assert judge(head, stored).status == "regressed"  # the stored level, from another machine
    outcome = judge(head, stored, base=base)
    assert outcome.status == "ok" and outcome.gate == "a/b", outcome.message
    assert outcome.baseline_local_efficiency == pytest.approx(0.66, rel=0.01)
    assert "within the base commit's 0.660" in outcome.message and "A/B against the base commit" in outcome.message


def test_a_10_percent_drop_against_the_base_commit_is_confirmed_over_rounds(stored):
    first = judge(rounds(0.594), stored, base=rounds(0.66))
    assert first.status == "noisy" and first.next_launches == 1  # one odd round is confirmed
    two = judge(rounds(0.594, 0.596), stored, base=rounds(0.66, 0.661))
    assert two.status == "noisy" and two.next_launches == 1  # at the 5% floor of the paired spread: one more
    three = judge(rounds(0.594, 0.596, 0.593), stored, base=rounds(0.66, 0.661, 0.659))
    assert three.status == "regressed" and three.failed, three.message
    assert (
        "is 9.9% below the base commit's 0.660 over 3 rounds (head/base 0.594/0.660, 0.596/0.661, 0.593/0.659)"
        in three.message
    )
    assert (
        "a 10% drop explains it better than no change" in three.message and "the floor of A/B rounds" in three.message
    )
    assert three.sequential["sigma"] == ab.SIGMA_FLOOR  # the recorded 2% x sqrt(2) is below the floor


def test_the_spread_is_lent_by_the_profile_or_a_default_and_the_rounds_can_only_widen_it(stored, tmp_path):
    assert ab.sigma_prior(stored, KEY) == (0.02, f"recorded for {KEY}")
    assert ab.sigma_prior(stored, "other:tiny")[0] == 0.02  # the median of the profile's recorded spreads
    assert ab.sigma_prior(None, KEY) == (ab.DEFAULT_SIGMA, "a default: no spread recorded for this profile")
    wild = judge(rounds(0.60, 0.70, 0.62), stored, base=rounds(0.66, 0.66, 0.66))
    assert wild.sequential["sigma"] > ab.SIGMA_FLOOR and "rounds' own spread" in wild.sequential["sigma_source"]


def test_memory_and_bytes_are_judged_against_the_base_commit(stored):
    """A PR that adds an all-reduce: bytes 20% above the base's, with the stored file's 5% tolerance."""
    head = rounds(0.66, 0.66, bytes_per_step=9.8e6 * 1.2)
    outcome = judge(head, stored, base=rounds(0.66, 0.66, bytes_per_step=9.8e6))
    assert (
        outcome.status == "regressed" and "bytes on the wire 11.760 MB/step are above baseline 9.800" in outcome.message
    )
    fat = rounds(0.66, 0.66, peak_memory_bytes=(500 << 20, 500 << 20))
    assert judge(fat, None, base=rounds(0.66, 0.66)).status == "regressed"  # default 25% without a stored file


def test_a_base_without_the_case_or_without_pairs_decides_nothing(stored):
    missing = judge(
        rounds(0.66),
        stored,
        base=CaseRecord(**{**dataclasses.asdict(record()), "launches": (), "failure": "not collected"}),
    )
    assert missing.status == "no-baseline" and "the base commit has no result" in missing.message
    bare = judge(rounds(0.66), stored, base=record(launch(pair_step_times_s=(), local_step_times_s=())))
    [timed] = [m for m in bare.metrics if m.metric == "local_efficiency"]  # memory and bytes still judged: ok overall
    assert timed.status == "not-meaningful" and "no round measured same-launch pairs on both commits" in timed.message


def test_the_command_line_tolerance_is_the_drop_to_catch(stored):
    head, base = rounds(*[0.62] * 7), rounds(*[0.66] * 7)  # -6%
    assert judge(head, stored, base=base).status != "regressed"
    assert judge(head, stored, Overrides(tolerance=0.05), base=base).status == "regressed"
