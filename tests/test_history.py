"""``python -m scalegate history``: the store, the check's verdicts and exit codes, quarantine, the page.

Run directories are synthetic, in the session's result format (one as tests/test_cli.py's make_case writes it,
the rest minimal); the commands run through ``main()`` in this process, and as real subprocesses where a nightly job
runs them (``test_the_nightly_sbatch_adds_its_run_and_fails_on_a_new_regression``). The tests of what a store
keeps run on both stores (``history_db``: a SQLite file, and a database on a real PostgreSQL server, tests/stores.py).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scalegate.history import ingest, sqlite_db, store
from tests import browser, stores
from tests.conftest import ROOT
from tests.runs import PROFILE, add_all, case, run, series_runs, write_run
from tests.test_cli import cli, make_case

QUARANTINE = {"reason": "shared runner, #17", "until": "2999-12-31"}
history_db = stores.fixture()


def test_add_is_idempotent_and_list_and_show_read_it_back(tmp_path, history_db):
    db = history_db
    real = write_run(tmp_path / "run-a", make_case("ddp-cnn-1x2", bytes_per_step=9.8e6))
    first = cli("history", "add", real, "--db", db)
    again = cli("history", "add", real, "--db", db)
    assert first.returncode == again.returncode == 0, first.stderr
    assert "added run-a (commit abc123" in first.stdout and "already there, unchanged: run-a" in again.stdout
    listed = cli("history", "list", "--db", db)
    assert listed.returncode == 0 and "run-a" in listed.stdout and "1 runs in" in listed.stdout
    assert "(none)" in listed.stdout  # the run's profile names no cluster, and the list says so
    shown = cli("history", "show", "ddp-cnn-1x2", "--db", db)
    assert shown.returncode == 0 and "ddp-cnn-1x2:tiny" in shown.stdout and "9.80 MB" in shown.stdout
    assert "efficiency" in shown.stdout and "peak_memory_bytes" in shown.stdout


def test_a_failed_case_keeps_its_status_but_no_metrics_and_a_partial_run_is_refused(tmp_path):
    _, rows = ingest.from_directory(write_run(tmp_path / "r", case("ddp-cnn-1x2", 0.8, status="failed")))
    assert rows[0].status == "failed" and rows[0].metrics == {}
    partial = write_run(tmp_path / "p", case("ddp-cnn-1x2", 0.8))
    (partial / "run.json").write_text(json.dumps({"status": "partial"}))
    refused = run("history", "add", partial, "--db", tmp_path / "h.sqlite")
    assert refused.returncode == 2 and "partial run" in refused.stderr and "HINT: " in refused.stderr
    assert run("history", "add", partial, "--partial", "--db", tmp_path / "h.sqlite").returncode == 0


WRITER = """
import sys
from scalegate.cli import main
db, runs = sys.argv[1], sys.argv[2:]
for run in runs:  # one nightly's add after another, each its own connection, as a job runs them
    assert main.main(["history", "add", run, "--db", db]) == 0
assert main.main(["history", "add", *runs, "--db", db]) == 0  # a retried step: a no-op, inside the same race
"""


def test_two_clusters_nightly_ingests_at_once_lose_nothing(tmp_path, history_db):
    """Two clusters (the same hardware) add their nightlies into one store at the same time: every run is there
    once, and each cluster's series is its own."""
    jobs = {}
    for cluster in ("alps", "bern"):
        jobs[cluster] = [
            write_run(
                tmp_path / cluster / f"{cluster}-nightly-{i:02d}",
                case("ddp-cnn-1x2", 0.8, commit=f"c{i}", written=1.8e9 + 86400 * i, profile=f"{PROFILE}@{cluster}"),
            )
            for i in range(12)
        ]
    if not history_db.startswith("postgresql:"):
        Path(history_db).parent.mkdir(parents=True, exist_ok=True)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, history_db, *map(str, runs)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for runs in jobs.values()
    ]
    errors = [p.communicate(timeout=240)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    with store.connect(history_db) as db:
        runs = [r for r, _ in store.runs(db)]
        series = store.all_series(db, ("efficiency",))
    assert len(runs) == 24 and {r.cluster for r in runs} == {"alps", "bern"}
    assert {k.machine: len(p) for k, p in series.items()} == {"cpu-test-2c@alps": 12, "cpu-test-2c@bern": 12}


def test_a_series_values_come_in_the_order_of_its_points_and_a_run_added_later_is_in_neither(tmp_path, history_db):
    """The check hands a series' values to its workers before it builds the points it judges them with: the two
    must be the same runs in the same order, oldest first, whatever order the store returns its rows in."""
    runs_dirs = series_runs(tmp_path, 8, slow_from=5)
    add_all(history_db, runs_dirs[::-1][:6])  # newest first: the store's rows are not in the series' order
    with store.connect(history_db) as db:
        known = [r for r, _ in store.runs(db)]
        add_all(history_db, runs_dirs[:2])  # added after the runs were read
        series = store.read_series(db, ("efficiency",), read=known)
    assert len(series.keys) == 2
    for key in series.keys:
        points = series.points(key)
        assert [p.run_id for p in points] == [f"nightly-{i:02d}" for i in range(2, 8)]
        assert series.values(key) == [p.value for p in points]
        assert all(p.commit == f"commit{p.run_id[-2:]}" and p.profile == PROFILE for p in points)


def test_a_database_locked_past_the_busy_timeout_exits_2_and_says_so(tmp_path, monkeypatch):
    db = tmp_path / "h.sqlite"
    add_all(db, series_runs(tmp_path, 1))
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another job in the middle of its add
    monkeypatch.setattr(sqlite_db, "BUSY_TIMEOUT_S", 0.3)
    try:
        done = run("history", "add", write_run(tmp_path / "tonight", case("ddp-cnn-1x2", 0.8)), "--db", db)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert done.returncode == 2 and "cannot be used: database is locked" in done.stderr, done.stderr
    assert "no job holds it locked" in done.stderr


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda p: None, "does not exist"),
        (lambda p: p.write_text("not a database at all, just text" * 50), "is not a readable SQLite file"),
        (
            lambda p: sqlite3.connect(p).execute("CREATE TABLE other (x)").connection.commit(),
            "is not a scalegate history",
        ),
    ],
)
def test_a_missing_or_corrupt_database_exits_2_with_a_hint(tmp_path, make, said):
    db = tmp_path / "h.sqlite"
    make(db)
    for command in (("list",), ("check",), ("show", "ddp-cnn-1x2"), ("report", "--out", tmp_path / "page")):
        done = (cli if command == ("list",) else run)("history", *command, "--db", db)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert said in done.stderr and "HINT: " in done.stderr and "Traceback" not in done.stderr


def test_bad_input_to_the_commands_exits_2(tmp_path):
    db = tmp_path / "h.sqlite"
    add_all(db, series_runs(tmp_path, 3))
    for args, said in (
        (("show", "nope-cnn-1x2"), "case nope-cnn-1x2 is not in the history"),
        (("check", "--case", "nope"), "known cases: ddp-cnn-1x2:tiny, fsdp-cnn-1x2:tiny"),
        (("check", "--pvalue", "2"), "--pvalue 2.0 is not in (0, 1)"),
        (("check", "--recent", "0"), "need --recent >= 1"),
        (("check", "--jobs", "0"), "--jobs 0: need at least 1"),
        (("add", tmp_path / "missing"), "does not exist"),
        (("add", tmp_path / "nightly-00", "--date", "yesterday"), "is not an ISO date"),
    ):
        done = run("history", *args, "--db", db)
        assert done.returncode == 2 and said in done.stderr and "HINT: " in done.stderr, (args, done.stderr)


def test_check_passes_a_steady_history_and_reports_short_ones(tmp_path):
    db = tmp_path / "h.sqlite"
    add_all(db, series_runs(tmp_path, 4))
    short = run("history", "check", "--db", db)
    assert short.returncode == 0 and "efficiency [cpu-test-2c]: insufficient data (4 runs, need 6)" in short.stdout
    add_all(db, series_runs(tmp_path / "more", 20))
    steady = run("history", "check", "--db", db, "--baseline-dir", tmp_path)
    assert steady.returncode == 0, steady.stdout
    assert "new regressions (first bad run among the last 5): 0" in steady.stdout


def test_check_fails_a_new_regression_and_names_the_commit_range(tmp_path, history_db):
    db = history_db
    add_all(db, series_runs(tmp_path, 20, slow_from=16, grow_from=15))
    done = run("history", "check", "--db", db, "--baseline-dir", tmp_path, "--json", tmp_path / "check.json")
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    data = json.loads((tmp_path / "check.json").read_text())
    slow = next(s for s in data["series"] if s["case"] == "ddp-cnn-1x2:tiny" and s["metric"] == "efficiency")
    assert (
        data["failed"]
        and slow["failed"]
        and slow["changes"][0]["first_bad"] == {"run": "nightly-16", "commit": "commit16"}
    )
    assert "ddp-cnn-1x2:tiny efficiency [cpu-test-2c]: regression -1" in out
    assert "from run nightly-16, commits commit15..commit16" in out and "NEW" in out
    assert "fsdp-cnn-1x2:tiny peak_memory_bytes [cpu-test-2c]: regression +2" in out
    assert "commits commit14..commit15" in out
    assert "new regressions (first bad run among the last 5): 4 in ddp-cnn-1x2:tiny efficiency" in out
    assert "fsdp-cnn-1x2:tiny efficiency" not in out  # the untouched metrics stay quiet
    alert = "  alert: ddp-cnn-1x2 [cpu-test-2c] efficiency, local_efficiency, throughput regressed at commits "
    assert alert + "commit15..commit16\n" in out
    assert "    reproduce: git checkout commit16 && python -m scalegate gate --base commit15 -k ddp-cnn-1x2\n" in out
    assert "    bisect:    python -m scalegate bisect commit15 commit16 -k ddp-cnn-1x2\n" in out
    assert slow["changes"][0]["bisect"] == ["python -m scalegate bisect commit15 commit16 -k ddp-cnn-1x2"]
    assert data["alerts"][0]["reproduce"].endswith("gate --base commit15 -k ddp-cnn-1x2")
    # the series were checked two at a time (--jobs: this machine's cores); one at a time finds the same
    alone = run(
        "history", "check", "--db", db, "--baseline-dir", tmp_path, "--jobs", "1", "--json", tmp_path / "1.json"
    )
    assert alone.returncode == 1 and json.loads((tmp_path / "1.json").read_text()) == data


def test_an_old_regression_no_longer_fails_and_a_wide_tolerance_makes_it_suspicious(tmp_path):
    db = tmp_path / "h.sqlite"
    add_all(db, series_runs(tmp_path, 20, slow_from=10))
    old = run("history", "check", "--db", db, "--case", "ddp-cnn-1x2", "--baseline-dir", tmp_path)
    assert old.returncode == 0 and "regression" in old.stdout and "old)" in old.stdout, old.stdout
    assert run("history", "check", "--db", db, "--recent", "10", "--baseline-dir", tmp_path).returncode == 1
    wide = run("history", "check", "--db", db, "--recent", "10", "--min-effect", "0.3", "--baseline-dir", tmp_path)
    assert wide.returncode == 0 and "suspicious -1" in wide.stdout and "min effect 30%" in wide.stdout


def test_a_case_dropped_from_the_nightlies_does_not_fail_them_forever(tmp_path):
    db = tmp_path / "h.sqlite"
    add_all(db, series_runs(tmp_path, 20, slow_from=16))
    assert run("history", "check", "--db", db, "--baseline-dir", tmp_path).returncode == 1
    later = [
        write_run(tmp_path / f"later-{i}", case("fsdp-cnn-1x2", 0.8, commit=f"later{i}", written=1.9e9 + i))
        for i in range(5)
    ]  # ddp-cnn-1x2 is no longer in the matrix
    add_all(db, later)
    done = run("history", "check", "--db", db, "--baseline-dir", tmp_path)
    assert done.returncode == 0, done.stdout
    assert "ddp-cnn-1x2:tiny efficiency [cpu-test-2c]: regression" in done.stdout and "old)" in done.stdout


def _baseline(directory: Path, **entry) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    cases = {"ddp-cnn-1x2:tiny": {"efficiency": {"value": 0.8, "tolerance": 0.25}, **entry}}
    (directory / f"{PROFILE}.json").write_text(json.dumps({"schema_version": 1, "profile": PROFILE, "cases": cases}))


def test_the_baseline_lends_the_tolerance_and_its_quarantine_holds_the_failure(tmp_path):
    db = tmp_path / "h.sqlite"
    add_all(db, series_runs(tmp_path, 20, slow_from=16, cases=("ddp-cnn-1x2",)))
    _baseline(tmp_path / "b1")
    tolerant = run("history", "check", "--db", db, "--baseline-dir", tmp_path / "b1")
    assert "efficiency [cpu-test-2c]: suspicious" in tolerant.stdout and "min effect 25%" in tolerant.stdout
    _baseline(tmp_path / "b2", quarantine=QUARANTINE)
    held = run("history", "check", "--db", db, "--baseline-dir", tmp_path / "b2", "--min-effect", "0.05")
    assert held.returncode == 0, held.stdout
    assert (
        "regression -1" in held.stdout
        and "quarantined, not failing: shared runner, #17 (until 2999-12-31)" in held.stdout
    )
    _baseline(tmp_path / "b3", quarantine={**QUARANTINE, "until": "2000-01-01"})
    expired = run("history", "check", "--db", db, "--baseline-dir", tmp_path / "b3", "--min-effect", "0.05")
    assert expired.returncode == 1 and "quarantined" not in expired.stdout


def test_report_static_writes_a_page_with_a_plot_per_case_and_metric(tmp_path):
    db = tmp_path / "h.sqlite"
    add_all(db, series_runs(tmp_path, 20, slow_from=16))
    done = run("history", "report", "--static", "--db", db, "--out", tmp_path / "page", "--baseline-dir", tmp_path)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "page" / "index.html").read_text()
    for cid in ("ddp-cnn-1x2", "fsdp-cnn-1x2"):
        for metric in ("efficiency", "local_efficiency", "throughput", "peak_memory_bytes", "bytes_per_step"):
            name = f"cpu-test-2c__{cid}_tiny__{metric}.png"  # the series: hardware (no cluster), case, metric
            assert f"src='{name}'" in page and (tmp_path / "page" / name).stat().st_size > 5000
    assert "1 new regression" not in page and "new regression(s)" in page  # ddp: efficiency, local, throughput
    assert "<code>commit15</code>..<code>commit16</code>" in page


@pytest.mark.slow  # several launches, or one of 15 s or more: the rest tier
def test_the_static_page_draws_in_a_headless_browser(tmp_path):
    """The interactive page's browser tests are tests/test_pages.py's; this one keeps --static's page honest."""
    import matplotlib.image

    path = browser.require()
    db = tmp_path / "h.sqlite"
    add_all(db, series_runs(tmp_path, 12, slow_from=8, cases=("ddp-cnn-1x2",)))
    done = run("history", "report", "--static", "--db", db, "--out", tmp_path / "page", "--baseline-dir", tmp_path)
    assert done.returncode == 0, done.stderr
    with browser.Chromium(path, width=1280, height=2000) as page:
        page.open((tmp_path / "page" / "index.html").as_uri())
        page.wait_for("[...document.images].every(i => i.complete && i.naturalWidth > 0)")
        page.screenshot(tmp_path / "shot.png")
    pixels = (matplotlib.image.imread(tmp_path / "shot.png")[..., :3] * 255).astype(np.uint8).reshape(-1, 3)
    colors = np.unique(pixels[:, 0].astype(np.int32) << 16 | pixels[:, 1].astype(np.int32) << 8 | pixels[:, 2])
    assert len(colors) > 500, f"only {len(colors)} distinct colors: the page drew blank or without its plots"
    red = np.all(np.abs(pixels.astype(int) - (214, 39, 40)) < 30, axis=1).sum()  # the regression's line and text
    assert red > 200, f"{red} red pixels: the new regression is not marked"
    assert (pixels.min(axis=1) < 200).mean() > 0.02  # ink on the page, not a white sheet


STUB_SRUN = """#!/usr/bin/env bash
# stands in for `srun pytest ...`: the run the nightly would have made is copied where pytest would write it
while [ $# -gt 0 ]; do [ "$1" = --scaling-results-dir ] && dir=$2; shift; done
mkdir -p "$dir/slurm-$SLURM_JOB_ID.0" && cp "$STUB_RUN"/*.json "$dir/slurm-$SLURM_JOB_ID.0/"
"""


def test_the_nightly_sbatch_adds_its_run_and_fails_on_a_new_regression(tmp_path):
    """slurm/nightly.sbatch end to end, with srun stubbed: tonight's run is the fourth slow one in a row."""
    runs = series_runs(tmp_path / "past", 20, slow_from=16, cases=("ddp-cnn-1x2",))
    db = tmp_path / "shared" / "history.sqlite"
    add_all(db, runs[:-1])
    submit = tmp_path / "submit"
    (submit / "bin").mkdir(parents=True)
    (submit / ".venv").symlink_to(ROOT / ".venv")
    (submit / "slurm").symlink_to(ROOT / "slurm")
    (submit / "bin" / "srun").write_text(STUB_SRUN)
    (submit / "bin" / "srun").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{submit / 'bin'}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_SUBMIT_DIR": str(submit),
        "SCALEGATE_TOPOLOGIES": "1x2",
        "SCALEGATE_HISTORY_DB": str(db),
        "STUB_RUN": str(runs[-1]),
    }
    done = subprocess.run(
        ["bash", str(ROOT / "slurm" / "nightly.sbatch")], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "added slurm-4242.0" in done.stdout
    assert "ddp-cnn-1x2:tiny efficiency [cpu-test-2c]: regression" in done.stdout
    assert "history check exit code 1" in done.stdout
    assert (submit / "results" / "nightly-4242" / "history" / "index.html").exists()
    with store.connect(db) as conn:
        assert len(store.runs(conn)) == 20
