"""One judge: pytest and ``python -m scalegate compare`` reach the same verdict from the same records.

The unit tests feed synthetic records to ``scalegate.judge.judge``; the end-to-end test runs the real suite
(a baseline from three launches, then a clean and a slowed session) and re-judges every result file
through ``compare``.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from scalegate.judge import CaseRecord, Conduct, LaunchRecord, Overrides, judge, references
from scalegate.record import baselines
from scalegate.record.runfiles import load_run

ROOT = Path(__file__).resolve().parents[1]
KEY, PROFILE = "ddp-cnn-1x2:tiny", "cpu-test"


def launch(local: float = 0.75, step_s: float = 0.040, **fields) -> LaunchRecord:
    """One launch: 20 measured steps, 40 pairs whose local/distributed ratio is ``local``."""
    wobble = [1 + 0.01 * ((i * 7) % 5 - 2) for i in range(40)]
    pair = tuple(step_s * w for w in wobble)
    values = dict(
        step_times_s=tuple(step_s * w for w in wobble[:20]),
        pair_step_times_s=pair,
        local_step_times_s=tuple(p * local for p in pair),
        final_loss=1.0,
        peak_memory_bytes=(300 << 20, 300 << 20),
        memory_source="rss",
        bytes_per_step=9.8e6,
    )
    return LaunchRecord(**{**values, **fields})


def record(*launches: LaunchRecord, **fields) -> CaseRecord:
    values = dict(
        case_id="ddp-cnn-1x2",
        key=KEY,
        profile=PROFILE,
        world_size=2,
        global_batch=64,
        steps=20,
        warmup=5,
        launches=launches or (launch(),),
        reference_step_times_s=tuple([0.028] * 20),
        reference_global_batch=32,
        reference_launches=1,
    )
    values.update(fields)
    return CaseRecord(**values)


@pytest.fixture
def baseline(tmp_path) -> baselines.BaselineFile:
    entry = {
        "efficiency": {"value": 0.70, "tolerance": 0.10},
        "noise_rel": 0.02,
        "local_efficiency": {"value": 0.75, "tolerance": 0.10, "sigma": 0.02, "launches": 10},
        "peak_memory_bytes": {"value": [300 << 20, 300 << 20], "tolerance": 0.25},
        "memory_source": "rss",
        "bytes_per_step": {"value": 9.8e6, "tolerance": 0.05},
        "final_loss": {"value": 1.0, "tolerance": 0.25},
        "throughput": {"value": 1600.0, "tolerance": 0.10},
        "steps": 20,
        "warmup": 5,
    }
    baselines.update(tmp_path, PROFILE, {}, {KEY: entry})
    return baselines.load(tmp_path, PROFILE)


def test_a_clean_launch_is_ok_on_the_local_gate(baseline):
    outcome = judge(record(), baseline)
    assert outcome.status == "ok" and outcome.gate == "local" and outcome.next_launches == 0
    assert outcome.local_efficiency == pytest.approx(0.75, rel=1e-3) and outcome.efficiency == pytest.approx(
        0.7, rel=0.02
    )
    assert outcome.message.startswith("local efficiency 0.750 within baseline 0.750")


def test_a_drop_asks_for_another_launch_then_regresses(baseline):
    first = judge(record(launch(0.66)), baseline)
    assert first.status == "noisy" and first.next_launches == 1 and not first.needs_reference
    second = judge(record(launch(0.66), launch(0.665)), baseline)
    assert second.status == "regressed" and second.next_launches == 0
    assert "is 11.7% below baseline 0.750 over 2 launches (0.660, 0.665)" in second.message
    assert f"[{KEY} on {PROFILE}]" in second.message


def test_undecided_at_the_budget_is_noisy_and_strict_fails_it(baseline):
    values = [launch(0.71), launch(0.72), launch(0.70), launch(0.71)]
    outcome = judge(record(*values, conduct=Conduct(max_launches=4)), baseline)
    assert (
        outcome.status == "noisy" and outcome.next_launches == 0 and "after the budget of 4 launches" in outcome.message
    )
    assert judge(record(*values, conduct=Conduct(max_launches=4)), baseline, Overrides(strict=True)).status == "failed"


def _recorded_on(baseline: baselines.BaselineFile, host_id: str, **local) -> baselines.BaselineFile:
    entry = dict(baseline.cases[KEY])
    entry["provenance"] = baselines.provenance("abc", "vm", {}, host_id)
    if local:
        entry["local_efficiency"] = {**entry["local_efficiency"], **local}
    return dataclasses.replace(baseline, cases={**baseline.cases, KEY: entry})


def test_a_baseline_from_another_host_widens_the_band_by_the_spread_between_hosts(baseline):
    """The CI's false alarm: fsdp-cnn-1x2 read 0.394 on one VM against 0.467 recorded on another, with no change."""
    loose = _recorded_on(baseline, "vm#00000001", tolerance=0.25)
    shifted = [launch(0.64), launch(0.635)]  # -15% against 0.75: a host's level, not a regression
    here = judge(record(*shifted, conduct=Conduct(max_launches=4)), loose)  # same host ("" = the recording one)
    assert here.status == "regressed"
    there = judge(record(*shifted, host="vm#00000002", conduct=Conduct(max_launches=4)), loose)
    assert there.status == "noisy" and there.sequential["host_spread"] == references.HOST_SPREAD
    assert there.next_launches == 0  # neither verdict reachable in 4 launches: launching them would only spend time
    assert "no verdict is reachable within 4 launches" in there.message
    assert "recorded on another host (vm#00000001, this is vm#00000002): hosts' levels spread ±9.5%" in there.message
    same = judge(record(*shifted, host="vm#00000001", conduct=Conduct(max_launches=4)), loose)
    assert same.status == "regressed"  # the recording host: no spread added
    # a drop beyond the tolerance is still caught from another host, and one launch of it asks for a second
    first = judge(record(launch(0.55), host="vm#00000002", conduct=Conduct(max_launches=4)), loose)
    assert first.status == "noisy" and first.next_launches == 1
    big = judge(record(launch(0.55), launch(0.56), host="vm#00000002", conduct=Conduct(max_launches=4)), loose)
    assert big.status == "regressed", big.message
    near = judge(record(launch(0.74), host="vm#00000002", conduct=Conduct(max_launches=4)), loose)
    assert near.status in ("ok", "noisy") and (near.status == "ok" or near.next_launches == 1)  # -1%: ok is reachable
    # a team that measured its own nodes' spread records it with the baseline
    own = _recorded_on(baseline, "vm#00000001", tolerance=0.25, host_sigma=0.02)
    assert judge(record(*shifted, host="vm#00000002", conduct=Conduct(max_launches=4)), own).status == "regressed"


def test_a_10_percent_gate_against_another_hosts_baseline_says_it_cannot_decide(baseline):
    """No number of launches averages a host's level away: no relaunch, and the message names the two ways out."""
    other = _recorded_on(baseline, "vm#00000001")  # tolerance 0.10: the gate command's drop
    outcome = judge(record(launch(0.75), host="vm#00000002", conduct=Conduct(max_launches=8)), other)
    assert outcome.status == "noisy" and outcome.next_launches == 0
    assert "no verdict is reachable within 8 launches" in outcome.message
    assert "python -m scalegate record-baselines" in outcome.message and "gate --base REF" in outcome.message
    unknown = dataclasses.replace(other, cases={KEY: {**other.cases[KEY], "provenance": {"hostname": "vm"}}})
    assert "recorded on another host (vm (no host id)" in judge(record(launch(0.75), host="vm#2"), unknown).message


def test_without_a_local_baseline_the_classic_gate_decides_and_confirms(baseline):
    entry = dict(baseline.cases[KEY])
    del entry["local_efficiency"]
    classic_only = dataclasses.replace(baseline, cases={KEY: entry})
    slow = launch(step_s=0.056)  # 0.028 / 0.056 = 0.5 against the baseline's 0.70
    first = judge(record(slow), classic_only)
    assert (
        first.gate == "classic" and first.status == "regressed" and first.next_launches == 1 and first.needs_reference
    )
    confirmed = judge(record(slow, slow), classic_only)
    assert confirmed.status == "regressed" and confirmed.next_launches == 0
    assert (
        "regression confirmed by relaunching the case and its reference; 2 launches judged together"
        in confirmed.message
    )
    # from another host the classic band widens by the spread between hosts: 0.60 (-14%) is no longer regressed
    elsewhere = _recorded_on(classic_only, "vm#00000001")
    shifted = record(launch(step_s=0.0467), host="vm#00000002")  # 0.028 / 0.0467 = 0.60
    assert judge(dataclasses.replace(shifted, host=""), elsewhere).status == "regressed"
    there = judge(shifted, elsewhere)
    assert there.status != "regressed" and "baseline recorded on another host, vm#00000001" in there.message


def test_memory_and_bytes_regress_without_a_confirmation(baseline):
    heavy = launch(peak_memory_bytes=(300 << 20, 500 << 20), bytes_per_step=20e6)
    outcome = judge(record(heavy), baseline)
    assert outcome.status == "regressed" and outcome.next_launches == 0
    lines = outcome.message.splitlines()
    assert lines[0].startswith(
        "peak memory of rank 1 500.0 MiB is above baseline 300.0 MiB (tolerance 25%, source rss)"
    )
    assert lines[1].startswith("bytes on the wire 20.000 MB/step are above baseline 9.800 MB/step")


def test_marker_tolerances_reach_memory_final_loss_and_throughput(baseline):
    heavy = launch(peak_memory_bytes=(300 << 20, 400 << 20))
    assert judge(record(heavy), baseline).status == "regressed"
    assert judge(record(heavy, tolerances={"peak_memory_bytes": 0.5}), baseline).status == "ok"
    worse = launch(final_loss=1.4)
    assert judge(record(worse), baseline).status == "failed"  # a different model: no performance verdict
    assert judge(record(worse, tolerances={"final_loss": 0.5}), baseline).status == "ok"
    slow = launch(step_s=0.080)  # 64 / 0.08 = 800 samples/s against 1600: only judged when the test asks
    assert all(m.metric != "throughput" for m in judge(record(slow), baseline).metrics)
    opted = judge(record(slow, tolerances={"throughput": 0.2}), baseline)
    assert any(m.metric == "throughput" and m.status == "regressed" for m in opted.metrics)


def test_a_memory_source_mismatch_is_not_a_regression(baseline):
    nvml = launch(peak_memory_bytes=(900 << 20, 900 << 20), memory_source="nvml")
    outcome = judge(record(nvml), baseline)
    assert outcome.status == "ok" and any("not compared: measured by nvml" in m.message for m in outcome.metrics)


def test_failures_and_oversubscription(baseline):
    assert judge(record(failure="ddp-cnn-1x2 hung"), baseline).status == "failed"
    wrong = judge(record(problems=("gradient agreement failed [ddp]",)), baseline)
    assert wrong.status == "failed" and wrong.message == "gradient agreement failed [ddp]"
    over = judge(record(oversubscribed=True, oversubscribed_why="1x4 oversubscribes 2 cores"), baseline)
    assert over.status == "ok" and any(m.status == "not-meaningful" for m in over.metrics)
    assert judge(record(), None).status == "no-baseline"
    assert judge(record(), None, Overrides(require_baseline=True)).status == "failed"


def test_the_runs_tolerance_travels_with_its_record(baseline):
    """`gate` runs pytest with --scaling-tolerance 0.1 and re-judges the result files: the same drop must decide."""
    wide = dataclasses.replace(
        baseline,
        cases={
            KEY: {
                **baseline.cases[KEY],
                "local_efficiency": {**baseline.cases[KEY]["local_efficiency"], "tolerance": 0.25},
            }
        },
    )
    dropped = (launch(0.675), launch(0.675))  # 10% below the baseline's 0.75
    assert judge(record(*dropped), wide).status == "ok"  # a 25% drop to catch: 10% is no change
    run = record(*dropped, conduct=Conduct(tolerance=0.10))
    again = CaseRecord.from_dict(json.loads(json.dumps(run.to_dict())))
    assert judge(again, wide).status == "regressed" and "a 10% drop explains it" in judge(again, wide).message
    assert judge(again, wide, Overrides(tolerance=0.25)).status == "ok"  # compare --tolerance still wins


def test_gate_rounds_merge_into_one_record_in_launch_order(baseline):
    """The gate's rounds (gate/merge.py): one launch per round, judged as one session's relaunches."""
    from scalegate.gate import merge

    rounds = [
        [
            {
                "case_id": "ddp-cnn-1x2",
                "key": KEY,
                "status": "noisy",
                "round": i,
                "record": record(launch(v), conduct=Conduct(max_launches=1, tolerance=0.1)).to_dict(),
            }
        ]
        for i, v in enumerate((0.66, 0.665))
    ]
    [case] = merge.merge(rounds, merge.Budgets(8))
    merged = CaseRecord.from_dict(case["record"])
    assert [round(launch.local_step_times_s[0] / launch.pair_step_times_s[0], 3) for launch in merged.launches] == [
        0.66,
        0.665,
    ]
    assert merged.conduct.max_launches == 8 and merged.conduct.tolerance == 0.1 and case["rounds"] == 2
    assert case["round"] == 1 and len(merged.reference_step_times_s) == 40  # the last round's file, both references
    assert judge(merged, baseline).status == "regressed"  # the same verdict as two launches of one session
    assert judge(CaseRecord.from_dict(rounds[0][0]["record"]), baseline).status == "noisy"


def test_the_reference_is_not_judged_against_itself(baseline):
    """single-<model>-1x1 is measured against its own launches: a wide interval there is no verdict (it was `noisy`)."""
    itself = record(launch(local=0.75), world_size=1, case_id="single-cnn-1x1", reference_itself=True)
    outcome = judge(itself, baseline)
    assert outcome.status == "ok" and outcome.gate == ""
    assert [m.status for m in outcome.metrics if m.metric == "efficiency"] == ["not-meaningful"]
    # a machine without a baseline for it: no-baseline, and --scaling-require-baseline fails it (the gate's canary)
    assert judge(itself, None).status == "no-baseline"
    missing = judge(itself, None, Overrides(require_baseline=True))
    assert (
        missing.status == "failed"
        and "no baseline for" in missing.message
        and "--scaling-require-baseline" in missing.message
    )


def test_the_record_survives_its_result_file(baseline):
    original = record(launch(0.66), launch(0.665), tolerances={"efficiency": 0.2}, note="links not shaped")
    again = CaseRecord.from_dict(json.loads(json.dumps(original.to_dict())))
    assert again == original and judge(again, baseline) == judge(original, baseline)


@pytest.mark.slow
@pytest.mark.nightly
def test_pytest_and_compare_give_identical_verdicts(tmp_path, suite):
    """The same records through the pytest session and through `python -m scalegate compare`."""
    bases = tmp_path / "baselines"
    common = [
        "--scaling-models",
        "cnn",
        "--scaling-strategies",
        "single,ddp,fsdp",  # the default matrix: single on 1x1, the others on 1x2
        "--scaling-steps",
        "8",
        "--scaling-warmup",
        "2",
        "--scaling-baseline-dir",
        str(bases),
        "--scaling-results-dir",
        str(tmp_path / "results"),
    ]
    first = suite(*common, "--scaling-update-baselines", "--scaling-launches", "3")
    assert first.returncode == 0, first.stdout + first.stderr
    for extra in ([], ["--scaling-inject-slowdown", "0.5"]):
        run = suite(*common, *extra)
        run_dir = sorted(p for p in (tmp_path / "results").iterdir() if p.is_dir() and p.name != "latest")[-1]
        from_pytest = {c["case_id"]: (c["status"], c["message"]) for c in load_run(run_dir)}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "scalegate",
                "compare",
                str(run_dir),
                "--baseline-dir",
                str(bases),
                "--json",
                str(tmp_path / "compare.json"),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        rows = json.loads((tmp_path / "compare.json").read_text())["cases"]
        assert {r["case_id"]: r["status"] for r in rows} == {k: v[0] for k, v in from_pytest.items()}, done.stdout
        for row in rows:
            if row["status"] != "ok":
                assert row["messages"][0] == from_pytest[row["case_id"]][1].splitlines()[0]
        assert (done.returncode == 0) == (run.returncode == 0), (done.stdout, run.stdout)
    assert {"regressed"} <= {r["status"] for r in rows}  # the slowed session did fail
