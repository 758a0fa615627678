"""A duet refused for GPU memory (launch/duet_fit.py, docs/duet.md "When a duet cannot run"): the decision on a
free-memory reading, the coordinator running the refused case's two jobs whole one after the other (the alternate
pairing), and the verdict and the PR table saying why a job that ran without a partner was judged as rounds.

There is no GPU on the machines these tests run on: the free-memory readings below are made-up numbers of GPUs that
cannot exist here, given to the pure decision function; NVML itself is read only on a GPU (``free_bytes``).
"""

from __future__ import annotations

import time

from scalegate.gate import verdict
from scalegate.judge import ab
from scalegate.judge.evidence import CaseRecord, LaunchRecord
from scalegate.judge.outcome import Overrides
from scalegate.launch import duet_fit
from scalegate.launch.duet import Coordinator
from tests.test_duet import Ranks

GIB = 2**30
WHY = "two resident jobs would not fit in GPU memory"


def _case(case_id: str, peaks: list[int], source: str = "nvml") -> dict:
    launch = {"peak_memory_bytes": peaks, "memory_source": source}
    return {
        "case_id": case_id,
        "record": {"launches": [launch, {**launch, "peak_memory_bytes": [p // 2 for p in peaks]}]},
    }


def test_a_case_whose_two_jobs_exceed_a_gpus_free_memory_is_refused_naming_gpu_sizes_and_source():
    """Fake free memory (no GPU here): GPU 1 has 30 GiB free; ddp-x-1x2's two jobs peak at 2 x 14 GiB on each GPU."""
    merged = {"base": [_case("ddp-x-1x2", [14 * GIB, 14 * GIB])], "head": [_case("ddp-x-1x2", [14 * GIB, 14 * GIB])]}
    (need,) = duet_fit.needs(merged, {})
    assert need.per_device == {0: 28 * GIB, 1: 28 * GIB}  # the largest launch's peaks, both sides
    found = duet_fit.refusals([need], [80 * GIB, 30 * GIB])
    assert found == {
        "ddp-x-1x2": f"{WHY}: GPU 1 has 30.0 GiB free, the case's two jobs peak at 28.0 GiB (+15%) "
        "(peaks per rank from last round)"
    }
    assert duet_fit.refusals([need], [80 * GIB, 40 * GIB]) == {}  # fits with the margin
    assert duet_fit.refusals([need], None) == {}  # no GPU (CPU): nothing to check


def test_a_case_no_round_has_run_takes_its_peaks_from_the_stored_baseline_and_an_unknown_one_is_refused_nothing():
    """Fake free memory (no GPU here). The baseline's fsdp-x-2x2 has 4 ranks on 2 GPUs a node: GPU r holds rank r
    and rank r+2 of each side."""
    stored = {
        "fsdp-x-2x2:tiny": {"peak_memory_bytes": {"value": [5 * GIB] * 4, "tolerance": 0.1}},
        "ddp-y-1x2:tiny": {"efficiency": {"value": 0.9, "tolerance": 0.1}},  # no peak recorded
    }
    needs = duet_fit.needs({"base": [], "head": [_case("single-x-1x1", [GIB], source="rss")]}, stored)
    assert [(n.case_id, n.per_device) for n in needs] == [("fsdp-x-2x2", {0: 20 * GIB, 1: 20 * GIB})]
    assert "from the stored baseline" in duet_fit.refusals(needs, [16 * GIB, 80 * GIB])["fsdp-x-2x2"]


def test_a_refused_cases_two_jobs_alternate_whole_one_after_the_other_and_say_why():
    log: list = []
    why = f"{WHY}: GPU 0 has 1.0 GiB free"
    with Coordinator(pair_wait_s=30, turn_s=30) as c:
        c.round_started({"big-x-1x2": why})
        head = Ranks(c, "head", "big-x-1x2", 2, 4, log).start()
        base = Ranks(c, "base", "big-x-1x2", 2, 4, log).start()
        head.join()  # the head's job runs whole first (the round's first side)
        c.side_ended("head")  # its session ends, as a gate's does: the base's job need not wait for it to park
        base.join()
        report = c.report()
    assert not head.errors and not base.errors, head.errors + base.errors
    assert all(s["alternate"] and s["why"].startswith(why) for s in head.summaries + base.summaries)
    spans = {side: [t for t, s, *_ in log if s == side] for side in ("head", "base")}
    first, second = sorted(spans.values(), key=min)
    assert max(first) < min(second)  # one job's steps all ran before the other's first: never both resident at work
    assert all(j["alternate"] and j["solo"].startswith(why) for j in report.values())


def test_the_alternate_pairing_runs_a_job_whole_only_while_the_other_sides_session_is_parked():
    """A job runs whole only while the other side's session is idle: a job of it waits for its first turn, or it
    has ended. Its imports, rank spawns and result writing between jobs made the job running beside them slower."""
    log: list = []
    with Coordinator(pair_wait_s=30, turn_s=30, alternate=True) as c:
        c.round_started({}, first="head")
        head = Ranks(c, "head", "ddp-x-1x2", 2, 3, log).start()
        time.sleep(0.6)
        assert not log, "the head's job ran while the base's session had no job waiting"
        joined = time.monotonic()
        base = Ranks(c, "base", "ddp-x-1x2", 2, 3, log).start()
        head.join()
        time.sleep(0.6)
        assert {side for _, side, *_ in log} == {"head"}, "the base's job ran while the head's session was busy"
        ended = time.monotonic()
        c.side_ended("head")
        base.join()
        report = c.report()
    assert not head.errors and not base.errors, head.errors + base.errors
    assert min(t for t, side, *_ in log if side == "head") > joined
    assert min(t for t, side, *_ in log if side == "base") > ended > max(t for t, side, *_ in log if side == "head")
    assert sorted(j["solo"] for j in report.values()) == [
        "alternate pairing: after the head job",
        "alternate pairing: before the base job",
    ]


def test_a_job_without_a_partner_reads_as_rounds_with_the_reason_in_the_verdict_and_the_pr_table():
    why = f"solo: {WHY}: GPU 0 has 1.0 GiB free, the case's two jobs peak at 1.2 GiB (+15%)"

    def record(step_s: float) -> CaseRecord:
        launch = LaunchRecord(
            step_times_s=(step_s,) * 12, reference_step_times_s=(0.010,) * 12, duet=why, reference_duet="paired"
        )
        return CaseRecord(
            case_id="big-x-1x2",
            key="big-x-1x2:tiny",
            profile="cuda-x",
            world_size=2,
            global_batch=16,
            steps=12,
            warmup=2,
            launches=(launch, launch),
            reference_step_times_s=(0.010,) * 24,
            reference_global_batch=8,
        )

    found = ab.timing(record(0.011), record(0.011), None, Overrides())
    assert f"not paired, judged as rounds: the head commit's case ran {why}" in found.message, found.message
    assert "duet against the base commit" not in found.message
    table = verdict.pairing_markdown(
        {
            "duet": True,
            "jobs": {"0:head:big-x-1x2": {"side": "head", "job": "big-x-1x2", "solo": why[6:], "failed": ""}},
        }
    )
    assert f"Not paired: head big-x-1x2: {WHY}" in table


def test_free_memory_reads_none_without_an_nvidia_driver():
    """This machine has no GPU: NVML cannot start, so the gate checks nothing (the CPU case)."""
    started = time.monotonic()
    assert duet_fit.free_bytes() is None
    assert time.monotonic() - started < 5
