"""pytest-benchmark records carry what the table and the case JSON show: the step breakdown (``comm exp``,
compute per rank) and the straggler verdict, so ``--benchmark-json`` and ``--benchmark-compare`` users see why a
step took its time. Synthetic rank results; the plugin's ``record_benchmark`` writes into a stand-in fixture."""

from __future__ import annotations

import json

from scalegate.contract.results import RankResult, aggregate
from scalegate.contract.spec import CaseSpec
from scalegate.figures import resources, stragglers
from scalegate.judge import Outcome
from scalegate.plugin import record_benchmark


class _Stats:
    def __init__(self) -> None:
        self.rounds: list[float] = []

    def update(self, seconds: float) -> None:
        self.rounds.append(seconds)


class _Benchmark:
    """What record_benchmark uses of pytest-benchmark's fixture (tests/test_gate.py runs the real one)."""

    disabled = False

    def __init__(self) -> None:
        self.extra_info: dict = {}
        self.stats = _Stats()

    def _make_stats(self, iterations: int) -> _Stats:
        return self.stats


def _rank(i: int, forward: float, local: float) -> RankResult:
    return RankResult(
        rank=i,
        world_size=2,
        node_rank=0,
        host="h",
        device="cpu",
        step_times_s=[0.05] * 5,
        losses=[1.0] * 5,
        warmup_losses=[1.0],
        loss_weight=0.5,
        forward_s=[forward] * 5,
        pair_step_times_s=[0.05] * 4,
        local_step_times_s=[local] * 4,
    )


def test_extra_info_has_the_breakdown_and_the_straggler_verdict():
    spec = CaseSpec.of(strategy="ddp", model="cnn", preset="tiny", topology="1x2", micro_batch=32, steps=5, warmup=1)
    result = aggregate(spec, [_rank(0, 0.020, 0.040), _rank(1, 0.031, 0.030)])
    late = stragglers.attribute(result)
    outcome = Outcome(
        case_id=spec.case_id,
        key="ddp-cnn-1x2:tiny",
        status="ok",
        message="",
        result=result,
        resources=resources.summary(result),
        stragglers=late,
    )
    bench = _Benchmark()
    record_benchmark(bench, outcome, "cpu-test")
    info = bench.extra_info
    assert bench.stats.rounds == [0.05] * 5
    assert info["comm_exposed_share"] == outcome.resources["breakdown"]["exposed_share"]
    assert info["compute_s"] == {"0": 0.040, "1": 0.030}
    assert info["exposed_comm_s"]["1"] == 0.05 - 0.030
    assert info["straggler_rank"] == 1 and info["straggler"] == late["message"] != ""
    json.dumps(info)  # --benchmark-json writes it as it is


def test_without_pairs_or_a_straggler_the_fields_are_there_and_empty():
    spec = CaseSpec.of(strategy="fsdp", model="cnn", preset="tiny", topology="1x2", micro_batch=32, steps=5, warmup=1)
    ranks = [_rank(i, 0.02, 0.03) for i in range(2)]
    ranks = [RankResult(**{**r.__dict__, "pair_step_times_s": [], "local_step_times_s": []}) for r in ranks]
    result = aggregate(spec, ranks)
    outcome = Outcome(case_id=spec.case_id, key="k", status="ok", message="", result=result)
    bench = _Benchmark()
    record_benchmark(bench, outcome, "cpu-test")
    assert bench.extra_info["comm_exposed_share"] is None and bench.extra_info["compute_s"] == {}
    assert bench.extra_info["straggler_rank"] is None and bench.extra_info["straggler"] == ""
