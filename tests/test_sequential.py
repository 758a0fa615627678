"""The sequential test over launches (harness/scalegate/judge/sequential.py): decisions and operating characteristics.

The rates are checked by simulation under the normal model the design assumes (seeded, so they repeat);
what the real launches on this machine give is measured by experiments/detection.py (docs/evidence/detection.md),
not here.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from scalegate.judge import sequential as S


def test_a_launch_at_the_baseline_is_ok_at_once():
    decision = S.decide([0.75], 0.75, 0.02, 10)
    assert decision.status == S.OK and decision.launches == 1 and decision.llr <= decision.lower


def test_a_clear_drop_needs_a_second_launch_to_be_called_regressed():
    first = S.decide([0.66], 0.75, 0.02, 10)
    assert first.status == S.UNDECIDED and first.llr >= first.upper  # evidence enough, but one launch is not a verdict
    second = S.decide([0.66, 0.67], 0.75, 0.02, 10)
    assert second.status == S.REGRESSED and math.isclose(
        second.change, math.exp((math.log(0.66 / 0.75) + math.log(0.67 / 0.75)) / 2) - 1
    )


def test_half_the_drop_stays_undecided_for_a_while():
    decision = S.decide([0.75 * 0.95], 0.75, 0.02, 10)
    assert decision.status == S.UNDECIDED


def test_one_wild_launch_is_clipped_not_unbounded():
    wild = S.decide([0.30], 0.75, 0.02, 10)
    moderate = S.decide([0.75 * (1 - 0.1 - 3 * 0.02)], 0.75, 0.02, 10)
    assert wild.llr == pytest.approx(moderate.llr, rel=0.05)  # both at the clip
    recovered = S.decide([0.30, 0.75, 0.76, 0.75], 0.75, 0.02, 10)
    assert recovered.status != S.REGRESSED


def test_the_baseline_spread_is_floored_and_its_own_error_counted():
    assert S.decide([0.75], 0.75, 0.0, 10).sigma == S.Design().sigma_floor
    few = S.decide([0.70, 0.70], 0.75, 0.03, 2)
    many = S.decide([0.70, 0.70], 0.75, 0.03, 50)
    assert abs(few.llr) < abs(many.llr)  # a baseline of two launches is weaker evidence


def test_drift_bounds_what_more_launches_can_prove():
    design = S.Design(drift=0.05, max_launches=20)
    llrs = [S.decide([0.70] * n, 0.75, 0.02, 10, design).llr for n in (2, 8, 20)]
    assert llrs[0] < llrs[1] < llrs[2] < 1.2 * llrs[0] * 20 / 2 / 4  # grows, but far slower than linearly


@pytest.mark.parametrize("sigma", [0.02, 0.04])
def test_operating_characteristics_under_the_normal_model(sigma):
    design = S.Design(max_launches=6)
    clean = S.simulate(0.0, sigma, 10, design, trials=4000)
    dropped = S.simulate(0.10, sigma, 10, design, trials=4000)
    assert clean[S.REGRESSED] <= design.alpha  # false alarms over the whole procedure
    assert dropped[S.REGRESSED] >= 1 - design.beta  # a 10% drop caught
    assert clean["mean_launches"] < 2.5 and dropped["mean_launches"] < 3.0


def test_a_bad_design_is_refused():
    with pytest.raises(ValueError, match="detect"):
        S.Design(detect=1.5)
    with pytest.raises(ValueError, match="alpha"):
        S.Design(alpha=0.7)
    with pytest.raises(ValueError, match="positive"):
        S.decide([0.0], 0.75, 0.02, 10)


def test_decidable_stops_launching_when_no_verdict_is_reachable():
    """A shared movement as wide as the drop (a baseline from another host) cannot be averaged away."""
    design = S.Design(detect=0.10, max_launches=8, drift=0.095)
    assert not S.decidable([0.75], 0.75, 0.02, 20, design)  # not even 7 more launches of no change
    assert S.decidable([0.75], 0.75, 0.02, 20, dataclasses.replace(design, drift=0.01))
    wide = S.Design(detect=0.25, max_launches=4, drift=0.095)  # the plain suite's band from another host
    assert S.decidable([0.45], 0.75, 0.02, 20, wide)  # a 40% drop: a second launch confirms it
    assert not S.decidable([0.64, 0.635], 0.75, 0.02, 20, wide)  # -15%: neither verdict in the two left
