"""Software changes inside the series: a version change is an event on the series, a change point at it is
attributed to it (bisect the package's releases), any other keeps its commit range; every alert says what to run
next; one odd night never raises one; a version change is judged only on the cases run on both sides of it."""

from __future__ import annotations

import json
from pathlib import Path

from scalegate.history import alerts, events
from scalegate.history.store import Point
from tests import browser, stores
from tests.runs import NIGHTS, add_all, case, nightlies, run, series_runs, write_run
from tests.test_pages import blob

history_db = stores.fixture()


def check(db: str, tmp_path: Path) -> tuple[int, str, dict]:
    done = run("history", "check", "--db", db, "--baseline-dir", tmp_path, "--json", tmp_path / "check.json")
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, done.stdout, json.loads((tmp_path / "check.json").read_text())


def test_a_drop_the_night_torch_changes_is_attributed_to_it_and_its_alert_bisects_torchs_releases(tmp_path, history_db):
    add_all(history_db, nightlies(tmp_path, upgrade_at=60, drop_at=60))
    code, out, data = check(history_db, tmp_path)
    assert code == 1, out
    assert (
        "ddp-cnn-1x2:tiny efficiency [cpu-test-2c]: regression -" in out
        and "from run nightly-0060, at torch 2.12.0 -> 2.13.0 (commits commit0059..commit0060)" in out
    ), out
    alert = (
        "  alert: ddp-cnn-1x2 [cpu-test-2c] efficiency, local_efficiency, throughput regressed at "
        "torch 2.12.0 -> 2.13.0 between nightly-0059 and nightly-0060\n"
        "    reproduce: python -m scalegate gate --base-python .venv/envs/torch-2.12.0/bin/python -k ddp-cnn-1x2\n"
        "    bisect:    python -m scalegate bisect --package torch 2.12.0 2.13.0 -k ddp-cnn-1x2\n"
    )
    assert alert in out and "bisect commit0059 commit0060" not in out
    assert (
        "version change [cpu-test-2c]: torch 2.12.0 -> 2.13.0 between nightly-0059 and nightly-0060; compared on "
        "the 2 case(s) run on both sides: 3 series regressed at it" in out
    )
    assert [a["event"] for a in data["alerts"]] == [True] and "fsdp" not in json.dumps(data["alerts"])
    # the page: one series per case and metric across the change, the change drawn on each, the alert's commands
    assert (
        run("history", "report", "--db", history_db, "--out", tmp_path / "page", "--baseline-dir", tmp_path).returncode
        == 0
    )
    page = blob(tmp_path / "page" / "index.html")
    assert len(page["series"]) == 2 * 5 and len(page["runs"]["id"]) == NIGHTS  # cases x checked metrics
    slow = next(s for s in page["series"] if s["case_id"] == "ddp-cnn-1x2" and s["metric"] == "efficiency")
    assert slow["runs"] == [[0, NIGHTS]] and slow["events"] == [{"i": 60, "text": "torch 2.12.0 → 2.13.0"}]
    assert slow["changes"][0]["bisect"] == ["python -m scalegate bisect --package torch 2.12.0 2.13.0 -k ddp-cnn-1x2"]
    assert all(s["events"] == slow["events"] for s in page["series"])  # every series crosses the same change
    assert page["alerts"][0]["cause"] == "torch 2.12.0 -> 2.13.0 between nightly-0059 and nightly-0060"


def test_the_same_drop_on_a_night_without_a_version_change_names_the_commit_range(tmp_path):
    db = tmp_path / "h.sqlite"
    add_all(db, nightlies(tmp_path, upgrade_at=40, drop_at=60))  # torch changed twenty nights before the drop
    code, out, data = check(str(db), tmp_path)
    assert code == 1, out
    assert "from run nightly-0060, commits commit0059..commit0060 (p=" in out, out
    assert (
        "  alert: ddp-cnn-1x2 [cpu-test-2c] efficiency, local_efficiency, throughput regressed at commits "
        "commit0059..commit0060\n"
        "    reproduce: git checkout commit0060 && python -m scalegate gate --base commit0059 -k ddp-cnn-1x2\n"
        "    bisect:    python -m scalegate bisect commit0059 commit0060 -k ddp-cnn-1x2\n"
    ) in out
    assert "--package" not in out and "between nightly-0039 and nightly-0040; compared on the 2 case(s)" in out
    assert "0 series regressed at it" in out and [a["event"] for a in data["alerts"]] == [False]


def test_a_single_outlier_never_raises_an_alert(tmp_path):
    runs = series_runs(tmp_path, 20, cases=("ddp-cnn-1x2",))
    db = tmp_path / "h.sqlite"
    add_all(db, runs[:10])
    add_all(db, [write_run(tmp_path / "odd" / "nightly-10", case("ddp-cnn-1x2", 0.4, written=1.8e9 + 86400 * 9.5))])
    add_all(db, runs[10:] + [write_run(tmp_path / "odd" / "last", case("ddp-cnn-1x2", 0.3, written=2e9))])
    done = run("history", "check", "--db", db, "--baseline-dir", tmp_path, "--recent", "22")
    assert done.returncode == 0 and "alert:" not in done.stdout, done.stdout  # a 50% and a 62% night, alone
    assert "5 series, 0 change points" in done.stdout
    assert "each side of a change point holds at least 3 runs: a single outlier never raises an alert" in done.stdout


def test_a_version_change_is_compared_only_on_the_cases_run_on_both_sides(tmp_path):
    db = tmp_path / "h.sqlite"
    before = nightlies(tmp_path / "a", upgrade_at=None, drop_at=99, cases=("ddp-cnn-1x2", "fsdp-cnn-1x2"))[:10]
    after = [
        write_run(
            tmp_path / "b" / f"later-{i}",
            case("ddp-cnn-1x2", 0.8, written=2e9 + i, profile="cpu-test-2c-torch2.14.0"),
            case("tp-cnn-1x2", 0.8, written=2e9 + i, profile="cpu-test-2c-torch2.14.0"),
        )
        for i in range(10)
    ]
    add_all(db, before + after)
    _, out, data = check(str(db), tmp_path)
    (change,) = data["version_changes"]
    assert change["compared"] == ["ddp-cnn-1x2:tiny"] and change["only_before"] == ["fsdp-cnn-1x2:tiny"]
    assert change["only_after"] == ["tp-cnn-1x2:tiny"] and change["changes"][0]["after"] == "2.14.0"
    assert "compared on the 1 case(s) run on both sides" in out and "not compared: 1 only before, 1 only after" in out


def _point(run_id: str, **versions: str) -> Point:
    return Point(run_id=run_id, commit=run_id, date=run_id, value=1.0, versions=versions)


def test_an_event_needs_a_package_both_runs_recorded_and_torch_comes_first():
    series = [
        _point("n1", torch="2.12.0", cuda="12.6"),
        _point("n2", torch="2.12.0", cuda="12.6", deepspeed="0.19.8"),  # newly recorded: no event
        _point("n3", torch="2.13.0", cuda="12.8", deepspeed="0.19.9"),
        _point("n4", torch="2.13.0", cuda="12.8", deepspeed="0.19.9"),
    ]
    (event,) = events.of_series(series)
    assert event.index == 2 and event.describe() == (
        "torch 2.12.0 -> 2.13.0, cuda 12.6 -> 12.8, deepspeed 0.19.8 -> 0.19.9 between n2 and n3"
    )
    steps = alerts.for_versions(event.changes, event.describe(), "ddp-cnn-1x2")
    assert steps.bisect == (
        "python -m scalegate bisect --package torch 2.12.0 2.13.0 -k ddp-cnn-1x2",
        "python -m scalegate bisect --package deepspeed 0.19.8 0.19.9 -k ddp-cnn-1x2",
    )  # CUDA comes with torch's build: no release of its own to bisect


def test_a_cuda_or_nccl_change_alone_has_no_release_to_bisect_and_says_so():
    (event,) = events.of_series(
        [_point("n1", torch="2.13.0", nccl="2.26.2"), _point("n2", torch="2.13.0", nccl="2.27.3")]
    )
    steps = alerts.for_versions(event.changes, event.describe(), "ddp-cnn-1x2")
    assert steps.bisect == () and "--base-python BASE_ENV/bin/python" in steps.reproduce
    said = alerts.Alert(machine="m", case_id="ddp-cnn-1x2", metrics=("efficiency",), steps=steps).lines()
    assert any("none: CUDA and NCCL come with torch's build" in line for line in said)


def test_the_page_draws_the_version_change_on_the_series_and_its_alert_in_a_real_browser(tmp_path):
    path = browser.require()
    db = tmp_path / "h.sqlite"
    add_all(db, nightlies(tmp_path, upgrade_at=60, drop_at=60, cases=("ddp-cnn-1x2",)))
    done = run("history", "report", "--db", db, "--out", tmp_path / "page", "--baseline-dir", tmp_path)
    assert done.returncode == 0, done.stderr
    with browser.Chromium(path, width=1280, height=1000) as page:
        page.open((tmp_path / "page" / "index.html").as_uri())
        page.wait_for("document.body.dataset.ready")
        page.wait_for("!!document.querySelector('#series-0 .main-svg')")  # the new regression's card, drawn
        drawn = page.js(
            "(() => { const L = document.querySelector('#series-0 .sg-plot')._fullLayout;"
            " return [L.shapes.filter(s => s.line.dash === 'dot').map(s => s.x0), L.annotations.map(a => a.text)]; })()"
        )
        banner = page.js("document.querySelector('.sg-banner').textContent")
        page.screenshot(tmp_path / "event.png")
    assert drawn[0] == [59.5] and "torch 2.12.0 → 2.13.0" in drawn[1], drawn  # between runs 59 and 60
    assert "python -m scalegate bisect --package torch 2.12.0 2.13.0 -k ddp-cnn-1x2" in banner
    assert "gate --base-python .venv/envs/torch-2.12.0/bin/python" in banner
