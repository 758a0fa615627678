"""The alternate pairing's estimate (docs/duet.md, "The alternate pairing's estimate"): whole launches one after the
other, each judged against its own same-launch reference where both launches ran local steps, else launch against
launch with the recorded alternate floor. Made-up step times: the launches' levels are what a shared host does
between launches, which these records set by hand.
"""

from __future__ import annotations

import dataclasses
import math

from scalegate import policy
from scalegate.gate import merge
from scalegate.judge import duet, duet_pairs
from scalegate.judge import metric as V
from scalegate.judge.evidence import ALTERNATE, PAIRED, CaseRecord, LaunchRecord
from scalegate.judge.outcome import Overrides

KEY = "ddp-cnn-1x2:tiny"


def _launch(level: float, drop: float = 0.0, local: bool = True) -> LaunchRecord:
    """One whole launch on a host running at ``level`` (1.0: as fast as ever; 1.15: every step 15% slower): its
    distributed steps ``drop`` slower than the code's own, its local steps untouched by the drop."""
    dist = [level * (1 + drop) * 0.030 * (1 + 0.04 * (i % 3)) for i in range(40)]
    own = [level * 0.012 * (1 + 0.03 * (i % 2)) for i in range(40)]
    pairs = [level * (1 + drop) * 0.030 * (1 + 0.04 * (i % 2)) for i in range(20)]
    return LaunchRecord(
        step_times_s=tuple(dist),
        reference_step_times_s=tuple(own),
        pair_step_times_s=tuple(pairs) if local else (),
        local_step_times_s=tuple(level * 0.013 * (1 + 0.03 * (i % 3)) for i in range(20)) if local else (),
        duet=ALTERNATE,
        reference_duet=ALTERNATE,
    )


def _records(rounds: list[tuple[LaunchRecord, LaunchRecord]]) -> tuple[CaseRecord, CaseRecord]:
    common = dict(case_id="ddp-cnn-1x2", key=KEY, profile="cpu-test", world_size=2, global_batch=64, steps=40, warmup=2)
    return (
        CaseRecord(**common, launches=tuple(h for h, _ in rounds)),
        CaseRecord(**common, launches=tuple(b for _, b in rounds)),
    )


def test_a_launchs_own_level_cancels_in_its_local_efficiency_and_not_launch_against_launch():
    """The head's launch ran on a host 15% slower throughout, the code unchanged: launch against launch reads a
    15% slower step at W; its local efficiency against the base launch's reads no change."""
    found = duet_pairs.round_estimate(_launch(1.15), _launch(1.0))
    assert found is not None and found.local is not None
    assert abs(found.efficiency_log) < 0.005, found.describe()
    assert math.exp(found.at_w.mean) - 1 > 0.14  # the level, which the separate 1x1 launch does not cancel here
    assert "local efficiency " in found.describe() and "same-launch pairs a side" in found.describe()
    slower = duet_pairs.round_estimate(_launch(1.0, drop=0.10), _launch(1.15))
    assert abs(slower.efficiency_log - math.log(1 / 1.10)) < 0.005, slower.describe()


def test_without_local_pairs_on_either_side_the_round_reads_launch_against_launch():
    found = duet_pairs.round_estimate(_launch(1.0, local=False), _launch(1.0))
    assert found is not None and found.local is None
    assert "at 1x1" in found.describe()


def test_an_alternate_gate_on_local_efficiencies_fails_a_10_percent_drop_on_a_drifting_host_and_names_its_floor():
    """Three rounds whose launches drift ±15% in level: the head's distributed step 10% slower fails on the local
    efficiencies, with the local floor named; the same rounds with the code unchanged pass."""
    levels = [(1.15, 1.0), (0.9, 1.1), (1.05, 0.85)]
    head, base = _records([(_launch(h, drop=0.10), _launch(b)) for h, b in levels])
    found = duet.timing(head, base, None, Overrides())
    assert found.status == V.REGRESSED, found.message
    assert "whole jobs alternating with the base commit's" in found.message
    assert "local efficiency -9.1%" in found.message
    assert "two launches' local efficiencies" in found.message  # RECORDED_AA_ALTERNATE["local"], named
    head, base = _records([(_launch(h), _launch(b)) for h, b in levels])
    assert duet.timing(head, base, None, Overrides()).status == V.OK


def test_a_round_without_local_pairs_makes_every_round_read_launch_against_launch():
    rounds = [(_launch(1.0, drop=0.10), _launch(1.0)), (_launch(1.0, drop=0.10, local=False), _launch(1.0))]
    found = duet.timing(*_records(rounds), None, Overrides())
    assert "local efficiency" not in found.message and "at 1x1" in found.message
    assert "12 A/A alternate rounds of ddp-cnn-1x2 recorded" in found.message  # the launch-against-launch floor


def test_a_case_whose_jobs_alternate_whole_gets_the_alternate_rounds_budget_and_the_rest_the_gates():
    """The gate's rounds reach the alternate pairing's budget where a case's jobs alternated whole (its own recorded
    spread needs more rounds); a case paired step by step keeps the gate's budget, as a deadline cuts both."""

    def files(duet_kind: str, case_id: str) -> list[dict]:
        head, _ = _records([(_launch(1.0), _launch(1.0))])
        launch = dataclasses.replace(head.launches[0], duet=duet_kind)
        record = dataclasses.replace(head, case_id=case_id, key=f"{case_id}:tiny", launches=(launch,))
        return [{"key": record.key, "case_id": case_id, "record": record.to_dict()}]

    def judged_within(budgets: merge.Budgets) -> dict[str, int]:
        merged = merge.merge([files(ALTERNATE, "ddp-cnn-1x2") + files(PAIRED, "fsdp-cnn-1x2")] * 2, budgets)
        return {c["case_id"]: CaseRecord.from_dict(c["record"]).conduct.max_launches for c in merged}

    budgets = merge.Budgets(8, script=7, alternate=policy.ALTERNATE_ROUNDS)
    assert budgets.most == policy.ALTERNATE_ROUNDS > 8
    assert judged_within(budgets) == {"ddp-cnn-1x2": policy.ALTERNATE_ROUNDS, "fsdp-cnn-1x2": 8}
    assert judged_within(merge.Budgets(3)) == {"ddp-cnn-1x2": 3, "fsdp-cnn-1x2": 3}
