"""Batch splitting: every sample of the global batch is computed by exactly one data-parallel rank,
and every rank (whatever the world size) builds the same global batch for a step."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from scalegate import workloads
from scalegate.contract.spec import CaseSpec
from scalegate.strategies.base import RankContext, Strategy


def shards(spec: CaseSpec) -> list[torch.Tensor]:
    samples = torch.arange(spec.global_batch_size)
    out = []
    for rank in range(spec.world_size):
        ctx = RankContext(
            rank=rank,
            world_size=spec.world_size,
            local_rank=rank,
            local_world_size=spec.world_size,
            node_rank=0,
            device=torch.device("cpu"),
        )
        out.append(Strategy(ctx, spec).shard(samples, samples)[0])
    return out


@given(world=st.integers(1, 16), micro=st.integers(1, 64))
def test_weak_scaling_assigns_every_sample_once(world, micro):
    spec = CaseSpec(strategy="ddp", model="cnn", preset="tiny", topology=f"1x{world}", micro_batch=micro)
    parts = shards(spec)
    assert all(len(p) == micro for p in parts)
    assert torch.equal(torch.sort(torch.cat(parts)).values, torch.arange(micro * world))


@given(world=st.integers(1, 16), per_rank=st.integers(1, 32))
def test_strong_scaling_assigns_every_sample_once(world, per_rank):
    spec = CaseSpec(
        strategy="ddp",
        model="cnn",
        preset="tiny",
        topology=f"1x{world}",
        micro_batch=8,
        scaling="strong",
        global_batch=world * per_rank,
    )
    assert torch.equal(torch.sort(torch.cat(shards(spec))).values, torch.arange(world * per_rank))


@settings(max_examples=20)
@given(step=st.integers(0, 200), size=st.integers(1, 256))
def test_every_process_builds_the_same_global_batch(step, size):
    workload = workloads.get("cnn")("tiny", seed=7)
    x1, y1 = workload.global_batch(step, size)
    x2, y2 = workloads.get("cnn")("tiny", seed=7).global_batch(step, size)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
