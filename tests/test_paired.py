"""Paired reference steps (``--scaling-paired``, harness/paired.py): real ranks, and the statistics."""

import numpy as np
import pytest

import fixtures
from harness import stats
from harness.launch import run_case
from harness.spec import CaseSpec


def _spec(**kw) -> CaseSpec:
    preset = fixtures.preset("cnn", "tiny")
    return CaseSpec(strategy="ddp", model="cnn", preset="tiny", topology="1x2", micro_batch=preset.micro_batch,
                    steps=4, warmup=1, **kw)


def test_rank0_times_one_reference_step_after_every_measured_step(tmp_path):
    result = run_case(_spec(paired=True), tmp_path / "case")
    assert len(result.paired_step_times_s) == 4 and all(t > 0 for t in result.paired_step_times_s)
    assert result.ranks[1].paired_step_times_s == []  # only rank 0 holds the copy
    assert result.losses[-1] < result.losses[0] * 2  # the case itself trained as usual


def test_off_by_default_nothing_is_paired(tmp_path):
    assert run_case(_spec(), tmp_path / "case").paired_step_times_s == []


def test_a_machine_phase_shared_by_both_steps_of_a_pair_cancels():
    rng = np.random.default_rng(1)
    phase = np.where(np.arange(40) < 20, 1.0, 1.3)  # the machine slows by 30% half-way through
    case = list(0.030 * phase * rng.normal(1, 0.01, 40))
    ref = list(0.020 * phase * rng.normal(1, 0.01, 40))
    paired = stats.paired_efficiency_estimate(case, 64, ref, 32, 2)
    unpaired = stats.efficiency_estimate(case, 64, ref, 32, 2)
    assert paired.value == pytest.approx(2 / 3, rel=0.15)
    assert paired.half_width_rel < 0.03 < unpaired.half_width_rel  # pairs move together; separate medians do not


def test_pairs_must_match():
    with pytest.raises(ValueError, match="4 case steps but 3 paired reference steps"):
        stats.paired_efficiency_estimate([0.1] * 4, 64, [0.1] * 3, 32, 2)


def _result(spec: CaseSpec, step_s: float, paired_s: float):
    from harness.results import RankResult, aggregate

    steps = [step_s * (1 + 0.01 * (i % 3)) for i in range(spec.steps)]
    ranks = [RankResult(rank=r, world_size=spec.world_size, node_rank=0, host="h", device="cpu", step_times_s=steps,
                        losses=[1.0 - 0.1 * i for i in range(spec.steps)], warmup_losses=[1.0],
                        loss_weight=1 / spec.world_size,
                        paired_step_times_s=[paired_s] * spec.steps if r == 0 and paired_s else [])
             for r in range(spec.world_size)]
    return aggregate(spec, ranks)


def test_a_baseline_serves_only_the_mode_it_was_recorded_in(tmp_path):
    import types

    from harness.baselines import BaselineFile
    from harness.matrix import Case
    from harness.session import ScalingSession

    spec = _spec(paired=True)
    case, ref = _result(spec, 0.030, 0.020), _result(spec.replace(strategy="single", topology="1x1"), 0.025, 0)
    entry = {"efficiency": {"value": 0.67, "tolerance": 0.1}, "noise_rel": 0.02, "paired": False}
    session = ScalingSession(options=types.SimpleNamespace(tolerance=None, require_baseline=False, strict=False),
                             host=types.SimpleNamespace(profile="cpu-test", cpu_cores=64), run_dir=tmp_path,
                             baseline=BaselineFile(path=tmp_path / "b.json", profile="cpu-test", fingerprint={},
                                                   cases={"ddp-cnn-1x2:tiny": entry}))
    outcome = session._judge(Case(id="ddp-cnn-1x2", spec=spec), "ddp-cnn-1x2:tiny", [case], [ref])
    assert outcome.efficiency == pytest.approx(0.020 / 0.0303, rel=0.01)  # from the pairs, not the 25 ms launch
    assert outcome.status == "no-baseline"
    assert "was recorded without --scaling-paired; record one in this mode" in outcome.message

    session.baseline.cases["ddp-cnn-1x2:tiny"]["paired"] = True
    outcome = session._judge(Case(id="ddp-cnn-1x2", spec=spec), "ddp-cnn-1x2:tiny", [case], [ref])
    assert outcome.status == "ok", outcome.message
