"""Parity: a second front end must train what raw PyTorch trains, at the same speed.

Each case trains both strategies in ONE launch on the same workload and topology (``harness/scalegate/parity.py``:
pairs, default topology 1x2): every rank runs the candidate's step and the baseline's back to back,
interleaved, alternating which goes first (``harness/scalegate/worker/companion.py``), so a slow phase of the shared
machine reaches both and cancels in their ratio (two separate launches differed by 10-35% from noise
alone). It asserts identical per-rank losses at every step (fp32, same seed and data: within 1e-6) and
a throughput shortfall within 10% (``--scaling-tolerance`` overrides it): a regression only when even
the top of the paired per-step ratio's 95% interval is below 0.9.

    pytest scaling_tests -k parity                                 # every pair, every selected workload
    pytest scaling_tests -k "parity-fabric-ddp-vs-ddp-cnn-1x2"     # one pair on one workload
"""

import pytest


def test_parity(parity_case):
    outcome = parity_case.run()
    if outcome.failed:
        pytest.fail(outcome.message, pytrace=False)
