"""Bytes on the wire: a private loopback per job counts exactly its traffic; the gate catches an extra
all-reduce; without a namespace the result says bytes are unavailable, and why.

Real torchrun jobs throughout. Byte counts on a private loopback repeat to ~0.1%, so these
assertions are deterministic even on a busy machine (no wall-clock is asserted).
"""

from __future__ import annotations

import pytest

from scalegate.contract.faults import Faults
from scalegate.contract.spec import CaseSpec
from scalegate.figures import resources
from scalegate.judge import judge
from scalegate.judge.evidence import from_results
from scalegate.launch import netns, run_case
from scalegate.launch.wirecount import ENV_DISABLE
from scalegate.measure.wire import WireCounter
from scalegate.record import baselines
from scalegate.report import table

needs_netns = pytest.mark.skipif(netns.available() is not None, reason=f"no network namespaces: {netns.available()}")


def spec(strategy: str = "ddp", **faults) -> CaseSpec:
    return CaseSpec.of(
        strategy=strategy,
        model="cnn",
        preset="tiny",
        topology="1x2",
        micro_batch=32,
        steps=3,
        warmup=1,
        faults=Faults(**faults),
    )


@pytest.fixture(scope="module")
def clean(tmp_path_factory, agents):
    return run_case(spec(), tmp_path_factory.mktemp("clean") / "case", agents=agents)


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
def test_an_extra_all_reduce_per_step_fails_the_bytes_gate(clean, tmp_path, agents):
    base = baseline_from(clean, tmp_path / "baselines")
    key = "ddp-cnn-1x2:tiny"
    assert judge(from_results([clean], [], key=key, profile="cpu-test"), base).status != "regressed"
    faulty = run_case(spec(extra_allreduce=1), tmp_path / "faulty", agents=agents)
    outcome = judge(from_results([faulty], [], key=key, profile="cpu-test"), base)
    problems = [m.message for m in outcome.metrics if m.status == "regressed"]
    assert len(problems) == 1, problems
    sent = resources.wire(faulty)["bytes_per_step"]
    assert sent > 1.9 * resources.wire(clean)["bytes_per_step"]  # one more gradient-sized all-reduce
    assert problems[0].startswith(f"bytes on the wire {sent / 1e6:.3f} MB/step are above baseline ")
    assert "(tolerance 5%; analytic 9.818 MB/step, netns:lo) [ddp-cnn-1x2:tiny on cpu-test]" in problems[0]
    # the judge makes it the case's verdict, whatever the timing says, and says so first
    assert outcome.status == "regressed" and outcome.message.splitlines()[0] == problems[0]


def test_without_a_namespace_bytes_are_unavailable_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_DISABLE, "1")
    # a cold torchrun: tests/test_warm.py checks the warm agent says the same, from a server in the root namespace
    result = run_case(spec(), tmp_path / "case")
    wire = resources.wire(result)
    assert wire["bytes_per_step"] is None and wire["source"] == "unavailable"
    assert wire["unavailable"] == f"{ENV_DISABLE}=1: the job ran in the root network namespace"
    assert wire["analytic_bytes_per_step"] > 0  # the prediction does not need a measurement
    row = table.rows(
        [
            {
                "case_id": "ddp-cnn-1x2",
                "status": "ok",
                "spec": {},
                "result": result.to_dict(),
                "resources": resources.summary(result),
            }
        ]
    )[0]
    # the table's bytes are the collective ledger's, which needs no namespace; the counter is only their check
    counted = resources.summary(result)["ledger"]
    assert row[table.HEADER.index("MB/step")] == f"{(counted['intra'] + counted['cross']) / 1e6:.2f}" != "n/a"


def test_a_worker_outside_a_private_namespace_records_no_bytes():
    counter = WireCounter(environ={})
    counter.start()
    counter.stop()
    assert counter.result(3) == {
        "source": "unavailable",
        "unavailable": "the launcher gave this job no private network namespace",
    }


def synthetic(topology: str, strategy: str, wires: list[dict], device: str = "cpu", wire_factor: float | None = None):
    """A CaseResult from hand-written rank results: the arithmetic of the wire summary, no job. The ranks report
    the strategy's wire factor for their backend, as harness/scalegate/worker/loop.py does."""
    from scalegate.contract.results import RankResult, aggregate

    s = spec(strategy).replace(topology=topology)
    per_node = s.topo.per_node
    ranks = [
        RankResult(
            rank=r,
            world_size=s.world_size,
            node_rank=r // per_node,
            host="h",
            device=device,
            step_times_s=[0.1] * s.run.steps,
            losses=[1.0] * s.run.steps,
            warmup_losses=[1.0],
            loss_weight=1 / s.world_size,
            full_state_bytes={"params": 4_000_000},
            wire=w,
            wire_factor=wire_factor,
        )
        for r, w in enumerate(wires)
    ]
    return aggregate(s, ranks)


def test_wire_summary_sums_nodes_and_keys_the_analytic_volume_by_backend():
    two_nodes = synthetic("2x2", "fsdp", [{"bytes_per_step": b, "source": "netns:eth0"} for b in (10, 12, 20, 21)])
    wire = resources.wire(two_nodes)
    assert wire["bytes_per_node"] == [10, 20] and wire["bytes_per_step"] == 30  # a node's ranks read one counter
    assert wire["measured_over_analytic"] is None and "inter-node bytes only" in wire["note"]
    gloo = synthetic("1x2", "fsdp", [{"bytes_per_step": 16_000_000, "source": "netns:lo"}] * 2, wire_factor=4.0)
    assert resources.wire(gloo)["analytic_bytes_per_rank"] == 4 * 1 / 2 * 4_000_000  # gloo reduce-scatter = all-reduce
    nccl = synthetic(
        "1x2", "fsdp", [{"bytes_per_step": 12_000_000, "source": "netns:lo"}] * 2, device="cuda:0", wire_factor=3.0
    )
    assert resources.wire(nccl)["analytic_bytes_per_rank"] == 3 * 1 / 2 * 4_000_000
    assert (
        resources.wire(synthetic("1x2", "pipeline-gpipe", [{"bytes_per_step": 9, "source": "netns:lo"}] * 2))[
            "analytic_bytes_per_rank"
        ]
        is None
    )  # activations on the wire: no formula
    missing = synthetic("1x2", "ddp", [{"source": "unavailable", "unavailable": "not root"}, {}])
    assert resources.wire(missing)["unavailable"] == "not root"
