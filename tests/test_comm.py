"""Bytes on the wire: a private loopback per job counts exactly its traffic; the gate catches an extra
all-reduce; without a namespace the result says bytes are unavailable, and why.

Real torchrun jobs throughout. Byte counts on a private loopback repeat to ~0.1%, so these
assertions are deterministic even on a busy machine (no wall-clock is asserted).
"""

from __future__ import annotations

import types

import pytest

from harness import baselines, resources, summary
from harness.launch import netns, run_case
from harness.launch.wirecount import ENV_DISABLE
from harness.matrix import Case
from harness.session import ScalingSession
from harness.spec import CaseSpec, Faults
from harness.wire import WireCounter

needs_netns = pytest.mark.skipif(netns.available() is not None, reason=f"no network namespaces: {netns.available()}")


def spec(strategy: str = "ddp", **faults) -> CaseSpec:
    return CaseSpec(strategy=strategy, model="cnn", preset="tiny", topology="1x2", micro_batch=32, steps=3,
                    warmup=1, faults=Faults(**faults))


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return run_case(spec(), tmp_path_factory.mktemp("clean") / "case")


def baseline_from(result, tmp_path) -> baselines.BaselineFile:
    """Record ``result`` as a baseline the way --scaling-update-baselines does, then load it back."""
    wire = resources.wire(result)
    entry = {"bytes_per_step": {"value": wire["bytes_per_step"], "tolerance": resources.DEFAULT_BYTES_TOLERANCE}}
    baselines.update(tmp_path, "cpu-test", {}, {"ddp-cnn-1x2:tiny": entry})
    return baselines.load(tmp_path, "cpu-test")


@needs_netns
def test_ddp_sends_what_ring_all_reduce_predicts(clean):
    wire = resources.wire(clean)
    assert wire["source"] == "netns:lo"
    grad_bytes = clean.ranks[0].full_state_bytes["grads"]
    assert wire["analytic_bytes_per_rank"] == int(2 * (2 - 1) / 2 * grad_bytes)
    # TCP/IP headers and the barrier's remainder: well under 1% on loopback
    assert 1.0 <= wire["measured_over_analytic"] < 1.01, wire
    for rank in clean.ranks:
        assert rank.wire["steps"] == 3 and rank.wire["barrier_bytes"] < 10_000


@needs_netns
def test_an_extra_all_reduce_per_step_fails_the_bytes_gate(clean, tmp_path):
    base = baseline_from(clean, tmp_path / "baselines")
    key, where = "ddp-cnn-1x2:tiny", "ddp-cnn-1x2:tiny on cpu-test"
    assert resources.regressions(clean, base, key, where) == []
    faulty = run_case(spec(extra_allreduce=1), tmp_path / "faulty")
    problems = resources.regressions(faulty, base, key, where)
    assert len(problems) == 1, problems
    sent = resources.wire(faulty)["bytes_per_step"]
    assert sent > 1.9 * resources.wire(clean)["bytes_per_step"]  # one more gradient-sized all-reduce
    assert problems[0].startswith(f"bytes on the wire {sent / 1e6:.3f} MB/step are above baseline ")
    assert "(tolerance 5%; analytic 9.818 MB/step, netns:lo) [ddp-cnn-1x2:tiny on cpu-test]" in problems[0]

    # the session turns it into the case's verdict, whatever the timing says
    session = ScalingSession(options=types.SimpleNamespace(tolerance=None, require_baseline=False, strict=False),
                             host=types.SimpleNamespace(profile="cpu-test", cpu_cores=64), run_dir=tmp_path,
                             baseline=base)
    outcome = session._judge(Case(id="ddp-cnn-1x2", spec=faulty.spec), key, faulty, clean)
    assert outcome.status == "regressed" and outcome.message.splitlines()[0] == problems[0]
    assert outcome.resources["wire"]["bytes_per_step"] == sent


def test_without_a_namespace_bytes_are_unavailable_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_DISABLE, "1")
    result = run_case(spec(), tmp_path / "case")
    wire = resources.wire(result)
    assert wire["bytes_per_step"] is None and wire["source"] == "unavailable"
    assert wire["unavailable"] == f"{ENV_DISABLE}=1: the job ran in the root network namespace"
    assert wire["analytic_bytes_per_step"] > 0  # the prediction does not need a measurement
    row = summary.rows([{"case_id": "ddp-cnn-1x2", "status": "ok", "spec": {}, "result": result.to_dict(),
                         "resources": resources.summary(result)}])[0]
    assert row[summary.HEADER.index("MB/step")] == "n/a"


def test_a_worker_outside_a_private_namespace_records_no_bytes():
    counter = WireCounter(environ={})
    counter.start()
    counter.stop()
    assert counter.result(3) == {"source": "unavailable",
                                 "unavailable": "the launcher gave this job no private network namespace"}
