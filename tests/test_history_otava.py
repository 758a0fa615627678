"""Long histories: Apache Otava's search says whether to look, the permutation test with splits seen within windows
judges (harness/scalegate/history/changepoint.py's ``find``, windows.py, otava_search.py)."""

from __future__ import annotations

import numpy as np
import pytest

from scalegate.history import changepoint as cp
from scalegate.history import check as C
from scalegate.history import energy, otava_search, sequential, windows
from tests.test_history_changepoint import noisy, points

pytest.importorskip("otava.analysis", reason="the extra changepoint (setup.sh installs it)")


def found(values, name: str = "x") -> list[int]:
    return [c.index for c in cp.find(values, seed=cp.seed_for(name))]


def test_up_to_exact_runs_a_series_is_tested_whole_as_before():
    z = noisy(cp.EXACT_RUNS, 3, step_at=70, step=-0.1)
    assert cp.find(z, seed=5) == cp.e_divisive(z, seed=5)
    assert found(z) == [70]


@pytest.mark.parametrize("seed", range(3))
def test_a_step_late_in_a_year_of_nightlies_is_found_at_its_run(seed):
    changes = cp.find(noisy(365, seed, step_at=300, step=-0.1), seed=seed)
    assert [c.index for c in changes] == [300] and changes[0].pvalue <= cp.DEFAULT_PVALUE


def test_a_regression_fixed_six_runs_later_is_found_at_both_ends_in_a_long_history():
    values = noisy(400, 1)
    values[250:256] *= 0.8
    changes, _ = C.judge_series(points(values), "efficiency", min_effect=0.05, settings=C.Settings(), name="x")
    assert [(c.index, c.kind) for c in changes] == [(250, C.REGRESSION), (256, C.IMPROVEMENT)]


def test_a_single_odd_night_in_a_long_history_is_no_change_point_nor_a_segment_of_otavas():
    values = noisy(600, 2)
    values[400] *= 0.5
    assert found(values) == []
    values[401] *= 0.6  # two odd nights in a row: still shorter than a segment of Otava's
    cuts = [0, *otava_search.candidates(values, min_size=3), len(values)]
    assert min(b - a for a, b in zip(cuts, cuts[1:])) >= 3, cuts


def test_on_noise_otavas_t_test_finds_change_points_and_the_permutation_test_keeps_almost_none():
    """20 flat series of 1,000 runs, 3% noise: Otava as shipped (its t-test, p <= 0.001) finds change points in
    several; judged by the permutation test, at most two keep one (docs/evidence/history.md counts more series)."""
    from otava.analysis import compute_change_points

    series = [noisy(1000, 20_000 + s) for s in range(20)]
    otava = sum(bool(compute_change_points(list(z))[0]) for z in series)
    judged = sum(bool(found(z, f"flat{s}")) for s, z in enumerate(series))
    assert otava >= 3 and judged <= 2, (otava, judged)


def test_the_same_long_history_gives_the_same_verdict_and_two_steps_30_runs_apart_are_both_found():
    z = noisy(500, 4, step_at=200, step=0.15)
    z[230:] *= 1.15
    first = cp.find(z, seed=9)
    assert first == cp.find(z, seed=9) and [c.index for c in first] == [200, 230]


def test_without_otava_a_long_series_is_tested_whole(monkeypatch):
    z = noisy(120, 6, step_at=90, step=-0.12)
    monkeypatch.setattr(otava_search, "available", lambda: False)
    assert cp.find(z, seed=2) == cp.e_divisive(z, seed=2)
    with pytest.raises(ValueError):
        cp.find(np.r_[z, np.nan])


def test_a_check_over_a_long_history_without_otava_says_how_to_get_it(tmp_path, monkeypatch):
    from scalegate.history import store
    from tests.runs import run

    db = tmp_path / "h.sqlite"
    with store.connect(db, create=True) as conn:
        for i, v in enumerate(noisy(cp.EXACT_RUNS + 1, 8)):
            added = store.Run(
                run_id=f"n{i:03d}",
                commit=f"c{i}",
                date=f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}",
                profile="cpu-test-2c",
            )
            case = store.CaseRow(
                case_key="ddp-cnn-1x2:tiny", case_id="ddp-cnn-1x2", status="ok", metrics={"efficiency": v}
            )
            store.add(conn, added, [case])  # fmt: skip
    monkeypatch.setattr(otava_search, "available", lambda: False)
    done = run("history", "check", "--db", db, "--baseline-dir", tmp_path, "--jobs", "1")
    assert done.returncode == 0 and "1 series longer than 100 runs tested whole" in done.stderr, done.stderr
    assert "pip install 'scalegate[changepoint]'" in done.stderr


def test_the_grid_covers_a_long_series_with_half_overlapping_windows_and_cuts_them_at_change_points():
    assert windows.grid(1000, 50) == [(j * 50, j * 50 + 100) for j in range(19)]
    assert windows.grid(1049, 50)[-1] == (900, 1049) and windows.grid(1050, 50)[-1] == (950, 1050)
    assert windows.grid(120, 50) == [(0, 120)]
    cut = windows.pieces(300, 50, [(0, 130), (130, 300)], 3)
    assert (100, 130) in cut and (130, 200) in cut and (0, 100) in cut and all(b - a >= 6 for a, b in cut)
    assert len(cut) == len(set(cut))


def test_a_curtailed_test_draws_the_fewest_shuffles_that_can_show_the_level_and_stops_at_the_first_hit():
    assert sequential.fewest(0.01) == 99 and sequential.fewest(0.01, 2) == 299 and sequential.fewest(0.05) == 19
    z = noisy(300, 5, step_at=200, step=-0.15)
    pieces = windows.pieces(len(z), cp.HALF, [(0, 300)], 3)
    index, q = cp._best(z[None], pieces, 3)
    kw = dict(pvalue=0.01, permutations=9999, min_size=3, seed=1, pieces=pieces)
    assert cp.permutation_test(z, [(0, 300)], float(q[0]), curtailed=0, **kw) == (0.01, 99)
    flat = noisy(300, 6)
    index, q = cp._best(flat[None], pieces, 3)
    p, drawn = cp.permutation_test(flat, [(0, 300)], float(q[0]), curtailed=0, **kw)
    assert p > 0.01 and drawn <= 2 * cp.FIRST_BLOCK
    assert cp.permutation_test(z, [(0, 300)], 1.0, curtailed=0, **{**kw, "permutations": 50}) == (1.0, 0)


@pytest.mark.parametrize("seed", range(3))
def test_a_regression_in_the_last_three_of_a_thousand_nights_is_found_at_its_first_run(seed):
    """Three runs 15% heavier at the end: a shuffle of the last window's own 100 runs puts three such runs side by
    side about once in 5,000, near the level a test of one window of 19 would need (0.01 / 19); a shuffle of all
    1,000 runs almost never does."""
    z = noisy(1000, 40 + seed)
    z[-3:] *= 1.15
    assert found(z, f"memory{seed}") == [997]


def test_the_local_test_holds_its_level_on_noise_without_otavas_screen():
    """The permutation test over all windows, not only where a search pointed (windows.py): 200 flat series of 300
    runs, p <= 0.01, expect ~2 with a change point; more than 8 (the binomial's 99.9% quantile) would mean the
    place of the best split is not inside the permutation."""
    hits = [s for s in range(200) if cp.e_divisive(noisy(300, 30_000 + s), seed=s, half=cp.HALF)]
    assert len(hits) <= 8, f"{len(hits)} of 200 flat series have a change point (seeds {hits[:20]})"


def test_otavas_search_with_the_suites_grid_and_t_test_computes_what_otavas_own_do():
    from otava.analysis import TTestSignificanceTester
    from otava.change_point_divisive.calculator import PairDistanceCalculator

    z = noisy(50, 9, step_at=30, step=0.1)
    theirs = PairDistanceCalculator(z)._get_Q_vals(0, 50)  # [i, j]: tau = i + 1, kappa = j + 2
    ours = energy.grid(z[None], 2)[0][1:-1, 2:]
    valid = (np.arange(1, 50)[:, None] >= 2) & (np.arange(2, 51)[None, :] - np.arange(1, 50)[:, None] >= 2)
    np.testing.assert_allclose(ours[valid], theirs[valid], rtol=1e-9)
    _, tester = otava_search._parts(3, 1e-3)
    for left, right in ((z[:30], z[30:]), (z[:5], z[5:9]), (z[:2], z[2:3])):
        want = TTestSignificanceTester(1e-3).compare(left, right)
        assert tester.compare(left, right).pvalue == pytest.approx(want.pvalue, rel=1e-9, abs=1e-300)
