"""The A/B gate's rounds, replayed: recorded launches through the gate's own judge, in seconds, not relaunches.

``experiments/data/detection-data-ab.jsonl`` holds 32 rounds per canary, collected as ``gate --base`` launches them
when it does not pair steps (base and head in alternating order; the head clean, and with every distributed step
11.1% slower: a 10% drop of the local efficiency). ``benchmarks/ab_replay.py`` hands each trial's rounds to
``scalegate.judge.judge(head, stored, base=base)`` one round at a time, as the gate does, until it decides or the
8-round budget is spent. Here: every
run of 8 consecutive rounds (the time structure the gate sees), without a stored baseline lending its spread (the
gate on a machine with no baseline file). The whole command end to end is tests/test_gate.py.
"""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks import ab_replay

BUDGET = 8


@pytest.fixture(scope="module")
def replay():
    from scalegate.judge import estimates

    saved = ab_replay.memoize_estimates()  # the replay's looks re-estimate each launch: once per launch
    rows = ab_replay.rows(ab_replay.DATA)

    def verdicts(strategy: str, slowdown: float) -> Counter:
        rounds = ab_replay.rounds(rows, strategy, slowdown)
        assert len(rounds) == 32
        trials = [rounds[start:] for start in range(len(rounds) - BUDGET + 1)]
        return Counter(ab_replay.verdict(strategy, trial, None, BUDGET)[0] for trial in trials)

    yield verdicts
    estimates.local, estimates.classic = saved  # the rest of the session judges with the module as shipped


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "deepspeed-zero2"])
def test_a_commit_against_itself_never_regresses(replay, strategy):
    verdicts = replay(strategy, 0.0)
    assert verdicts["regressed"] == 0, verdicts
    assert verdicts["ok"] >= 24, verdicts  # decided within the budget, not left noisy


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "deepspeed-zero2"])
def test_a_10_percent_drop_is_caught_and_never_passed(replay, strategy):
    verdicts = replay(strategy, 0.111)
    assert verdicts["ok"] == 0, verdicts
    assert verdicts["regressed"] >= 22, verdicts  # of 25 trials; the rest stay noisy (a relaunch, never a pass)
