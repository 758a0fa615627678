"""Quarantine (harness/scalegate/record/quarantine.py): a flaky case reports its verdict but does not fail, until a date.

Synthetic records and run directories as in tests/test_judge.py and tests/test_cli.py; the end-to-end test runs
a real launch whose gradients are wrong (an injected fault) under a quarantine, through pytest.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from scalegate.contract.errors import BaselineError
from scalegate.judge import Overrides, judge
from scalegate.record import baselines
from tests.runs import PROFILE, write_run
from tests.test_cli import cli, make_case
from tests.test_judge import KEY, launch, record

HELD = {"reason": "gloo all-gather stalls on this image, #123", "until": "2026-12-31"}


def _with(baseline: baselines.BaselineFile, **entry) -> baselines.BaselineFile:
    return dataclasses.replace(baseline, cases={**baseline.cases, KEY: {**baseline.cases[KEY], **entry}})


@pytest.fixture
def baseline(tmp_path) -> baselines.BaselineFile:
    entry = {"local_efficiency": {"value": 0.75, "tolerance": 0.10, "sigma": 0.02, "launches": 10}}
    baselines.update(tmp_path, "cpu-test", {}, {KEY: entry})
    return baselines.load(tmp_path, "cpu-test")


def test_a_quarantined_regression_is_reported_and_does_not_fail_until_its_date(baseline):
    slow = record(launch(0.66), launch(0.665))
    assert judge(slow, baseline).failed
    held = judge(slow, _with(baseline, quarantine=HELD), Overrides(today="2026-12-31"))
    assert held.status == "regressed" and not held.failed  # the verdict stands; only its failure is held
    assert held.quarantined == "gloo all-gather stalls on this image, #123 (until 2026-12-31)"
    assert held.message.startswith("quarantined, not failing: gloo all-gather") and "11.7% below" in held.message
    expired = judge(slow, _with(baseline, quarantine=HELD), Overrides(today="2027-01-01"))
    assert expired.failed and not expired.quarantined
    assert "its quarantine ran out on 2026-12-31" in expired.message and "it gates again" in expired.message
    clean = judge(record(), _with(baseline, quarantine=HELD), Overrides(today="2026-11-23"))
    assert clean.status == "ok" and clean.quarantined  # listed even when it passes: never silent


@pytest.mark.parametrize(
    "bad, said",
    [
        ({"until": "2026-12-31"}, "needs {'reason'"),
        ({"reason": "flaky", "until": "next week"}, "'next week' is not a date"),
        ("flaky", "needs {'reason'"),
    ],
)
def test_a_malformed_quarantine_names_the_case_and_the_fix(tmp_path, bad, said):
    path = tmp_path / "cpu-test.json"
    path.write_text(json.dumps({"schema_version": 1, "profile": "cpu-test", "cases": {KEY: {"quarantine": bad}}}))
    with pytest.raises(BaselineError) as err:
        baselines.load(tmp_path, "cpu-test")
    assert f"case {KEY!r} quarantine" in str(err.value) and said in str(err.value)
    assert '"until": "2026-12-31"' in err.value.hint


def test_a_rerecorded_baseline_keeps_what_the_team_wrote(tmp_path, baseline):
    entry = {**baseline.cases[KEY], "quarantine": HELD}
    entry["local_efficiency"] = {**entry["local_efficiency"], "host_sigma": 0.02}
    baselines.update(tmp_path, "cpu-test", {}, {KEY: entry})
    fresh = {"local_efficiency": {"value": 0.74, "tolerance": 0.10, "sigma": 0.03, "launches": 20}}
    baselines.update(tmp_path, "cpu-test", {}, {KEY: fresh})
    kept = baselines.load(tmp_path, "cpu-test").cases[KEY]
    assert kept["quarantine"] == HELD and kept["local_efficiency"]["host_sigma"] == 0.02
    assert kept["local_efficiency"]["value"] == 0.74


def test_compare_and_the_gate_table_list_a_quarantined_failure_and_pass(tmp_path):
    bases = tmp_path / "baselines"
    assert (
        cli(
            "update-baselines",
            write_run(tmp_path / "clean", make_case()),
            "--baseline-dir",
            bases,
            "--tolerance",
            "0.05",
        ).returncode
        == 0
    )
    run = write_run(tmp_path / "run", make_case(step_s=0.045))  # far slower: regressed
    assert cli("compare", run, "--baseline-dir", bases).returncode == 1
    path = bases / f"{PROFILE}.json"
    data = json.loads(path.read_text())
    data["cases"]["ddp-cnn-1x2:tiny"]["quarantine"] = {"reason": "known flaky", "until": "2999-01-01"}
    path.write_text(json.dumps(data))
    done = cli("compare", run, "--baseline-dir", bases)
    assert done.returncode == 0, done.stdout
    assert "regressed 🔇 quarantined" in done.stdout and "Quarantined in the baseline file" in done.stdout
    assert "- `ddp-cnn-1x2:tiny`: known flaky (until 2999-01-01)" in done.stdout


@pytest.mark.slow
@pytest.mark.nightly  # nightly: the quarantine's fault test is in the fast tier
def test_a_quarantined_case_that_crashes_runs_reports_and_does_not_fail_the_session(tmp_path, suite):
    """Real launches: rank 1 of ddp-cnn-1x2 crashes; quarantined, the session passes and lists it (xfail)."""
    from scalegate.plan import hostinfo

    bases = tmp_path / "baselines"
    bases.mkdir()
    profile = hostinfo.detect().profile
    (bases / f"{profile}.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "profile": profile,
                "cases": {
                    "ddp-cnn-1x2:tiny": {
                        "quarantine": {"reason": "rank 1 dies on this image, #7", "until": "2999-01-01"}
                    }
                },
            }
        )
    )
    args = [
        "-k",
        "ddp-cnn-1x2 and not parity",
        "--scaling-models",
        "cnn",
        "--scaling-strategies",
        "ddp",
        "--scaling-topologies",
        "1x2",
        "--scaling-steps",
        "5",
        "--scaling-warmup",
        "1",
        "--scaling-local-steps",
        "0",
        "--scaling-inject-fault",
        "crash:rank=1,step=1",
        "--scaling-baseline-dir",
        str(bases),
    ]
    held = suite(*args)
    assert held.returncode == 0, held.stdout[-3000:]
    assert "1 xfailed" in held.stdout and "quarantined, not failing: rank 1 dies on this image, #7" in held.stdout
    assert "quarantined, not failing: ddp-cnn-1x2: rank 1 dies on this image, #7 (until 2999-01-01)" in held.stdout
    (bases / f"{profile}.json").write_text(json.dumps({"schema_version": 1, "profile": profile, "cases": {}}))
    assert suite(*args).returncode == 1  # the same crash, no quarantine: the session fails
