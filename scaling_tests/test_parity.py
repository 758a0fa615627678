"""Parity: a second front end must train what raw PyTorch trains, at the same speed.

Each case runs both strategies on the same workload and topology (``harness/parity.py``: pairs,
default topology 1x2) and asserts identical per-rank losses (fp32, same seed and data: within 1e-6)
and a throughput shortfall within 10% (``--scaling-tolerance`` overrides it), beyond the noise band.

    pytest scaling_tests -k parity                                 # every pair, every selected workload
    pytest scaling_tests -k "parity-fabric-ddp-vs-ddp-cnn-1x2"     # one pair on one workload
"""

import pytest


def test_parity(parity_case):
    outcome = parity_case.run()
    if outcome.failed:
        pytest.fail(outcome.message, pytrace=False)
