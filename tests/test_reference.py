"""The single-process reference computes what the strategy computes (harness/scalegate/worker/reference.py), in process.

Without batch-statistics layers the reference of pieces equals the whole-batch one, so those models keep it. With
BatchNorm, DDP normalises each rank's shard: two copies of the model, one per shard, with their gradients averaged
and rank 0's running statistics, are what the reference must equal; a pipeline stage sees every micro-batch in
order. SyncBatchNorm's reference is plain BatchNorm over the whole batch. Real processes:
tests/test_models_as_written.py.
"""

from __future__ import annotations

import copy
import types

import pytest
import torch
from torch import nn

from scalegate.contract.faults import Faults
from scalegate.contract.spec import CaseSpec
from scalegate.strategies.pipeline import _tied
from scalegate.worker.reference import Reference, batch_statistics, pieces_for, plain_batchnorm

CE = nn.functional.cross_entropy


def _spec(**faults) -> CaseSpec:
    return CaseSpec.of(strategy="ddp", model="m", preset="tiny", topology="1x2", micro_batch=8, faults=Faults(**faults))


def _bn_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 3)
    )


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 3))


def _batch(shape: tuple[int, ...], step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(step)
    return torch.randn(16, *shape, generator=gen), torch.randint(3, (16,), generator=gen)


def _ddp_by_hand(model: nn.Module, steps: int) -> tuple[nn.Module, list[dict[str, torch.Tensor]]]:
    """Two replicas, one shard each, gradients averaged, the same AdamW step; rank 0's buffers broadcast."""
    replicas = [copy.deepcopy(model) for _ in range(2)]
    optimizers = [torch.optim.AdamW(r.parameters(), lr=1e-3) for r in replicas]
    grads = []
    for step in range(steps):
        x, y = _batch((1, 6, 6), step)
        for replica in replicas[1:]:  # DDP's broadcast_buffers before every forward
            for mine, first in zip(replica.buffers(), replicas[0].buffers()):
                mine.copy_(first)
        for rank, replica in enumerate(replicas):
            replica.zero_grad()
            CE(replica(x[rank * 8 : (rank + 1) * 8]), y[rank * 8 : (rank + 1) * 8]).backward()
        mean = [(a.grad + b.grad) / 2 for a, b in zip(*(r.parameters() for r in replicas))]
        for replica, optimizer in zip(replicas, optimizers):
            for param, grad in zip(replica.parameters(), mean):
                param.grad = grad.clone()
            optimizer.step()
        grads.append({n: g for (n, _), g in zip(replicas[0].named_parameters(), mean)})
    return replicas[0], grads


def test_without_batch_statistics_the_reference_of_pieces_is_the_whole_batch_reference():
    model = _mlp()
    assert not batch_statistics(model)
    whole, pieces = (
        Reference(model, _spec(), torch.device("cpu"), CE),
        Reference(model, _spec(), torch.device("cpu"), CE, pieces=2),
    )
    for step in range(3):
        x, y = _batch((6,), step)
        a, b = whole.step(x, y), pieces.step(x, y)
        for name in a:
            assert torch.allclose(a[name], b[name], rtol=0, atol=1e-6 * float(a[name].abs().max())), name
    assert whole.losses == pytest.approx(pieces.losses, rel=1e-6)
    for name, param in whole.parameters().items():
        assert torch.allclose(param, pieces.parameters()[name], atol=1e-6)


def test_with_batchnorm_the_reference_equals_ddp_gradients_parameters_and_rank_0s_running_statistics():
    model = _bn_model()
    assert batch_statistics(model)
    reference = Reference(model, _spec(), torch.device("cpu"), CE, pieces=2, running="first")
    replica, ddp_grads = _ddp_by_hand(model, steps=3)
    for step in range(3):
        x, y = _batch((1, 6, 6), step)
        got = reference.step(x, y)
        for name, want in ddp_grads[step].items():
            assert torch.allclose(got[name], want, atol=1e-7), (step, name)
    for name, value in replica.state_dict().items():
        assert torch.allclose(reference.model.state_dict()[name].float(), value.float(), atol=1e-6), name


def test_the_whole_batch_reference_of_a_batchnorm_model_is_a_different_computation():
    """Why the reference changed: the old one does not compute what DDP computes."""
    model = _bn_model()
    whole = Reference(model, _spec(), torch.device("cpu"), CE)
    _, ddp_grads = _ddp_by_hand(model, steps=1)
    got = whole.step(*_batch((1, 6, 6), 0))
    assert (got["1.bias"] - ddp_grads[0]["1.bias"]).abs().max() > 1e-3 * got["1.bias"].abs().max()


def test_a_pipeline_reference_updates_the_running_statistics_with_every_micro_batch_in_order():
    model = _bn_model()
    reference = Reference(model, _spec(), torch.device("cpu"), CE, pieces=2, running="all")
    by_hand = copy.deepcopy(model)
    x, y = _batch((1, 6, 6))
    reference.step(x, y)
    by_hand(x[:8]), by_hand(x[8:])
    assert torch.allclose(reference.model[1].running_mean, by_hand[1].running_mean)
    assert int(reference.model[1].num_batches_tracked) == 2


class _Strategy:
    norm_pieces, running_statistics = 4, "all"


def test_pieces_follow_the_strategy_only_where_batchnorm_sees_the_pieces():
    assert pieces_for(_bn_model(), _Strategy(), _spec(), sync_batchnorm=False) == (4, "all")
    assert pieces_for(_mlp(), _Strategy(), _spec(), sync_batchnorm=False) == (1, "first")
    assert pieces_for(_bn_model(), _Strategy(), _spec(), sync_batchnorm=True) == (1, "first")  # the whole batch
    assert pieces_for(_bn_model(), _Strategy(), _spec(whole_batch_reference=True), sync_batchnorm=False)[0] == 1


def test_a_syncbatchnorm_model_gets_a_plain_batchnorm_reference_over_the_whole_batch():
    model = _bn_model()
    synced = nn.SyncBatchNorm.convert_sync_batchnorm(copy.deepcopy(model))
    assert not batch_statistics(synced)  # SyncBatchNorm normalises the global batch
    plain = plain_batchnorm(copy.deepcopy(synced))
    assert not any(isinstance(m, nn.SyncBatchNorm) for m in plain.modules())
    x, _ = _batch((1, 6, 6))
    assert torch.allclose(plain(x), model(x), atol=1e-6)
    assert torch.allclose(plain[1].running_mean, model[1].running_mean)


def test_a_parameter_that_two_pipeline_stages_share_is_found_in_both():
    embed, hidden = nn.Embedding(8, 4), nn.Linear(4, 4)
    head = nn.Linear(4, 8, bias=False)
    head.weight = embed.weight
    model = nn.ModuleDict({"embed": embed, "hidden": hidden, "head": head})
    names = {id(p): n for n, p in model.named_parameters()}
    assert _tied([nn.Sequential(embed, hidden), nn.Sequential(head)], names) == [("embed.weight", [0, 1])]
    assert _tied([nn.Sequential(embed), nn.Sequential(hidden)], names) == []


def test_default_fsdp_units_open_containers_and_leave_tied_parameters_with_the_root():
    from scalegate import Workload

    embed, head = nn.Embedding(8, 4), nn.Linear(4, 8, bias=False)
    head.weight = embed.weight
    blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
    model = nn.Module()
    model.parts = nn.ModuleDict({"embed": embed, "blocks": blocks, "norm": nn.LayerNorm(4)})
    model.head, model.act = head, nn.ReLU()
    units = Workload.fsdp_blocks(types.SimpleNamespace(), model)
    assert units == [blocks[0], blocks[1], model.parts["norm"]]


def test_a_sync_batchnorm_workload_trains_synced_against_a_plain_whole_batch_reference(monkeypatch):
    """The worker converts the ranks' model and not the reference's. In one process without a process group
    SyncBatchNorm computes plain BatchNorm (torch runs it distributed on CUDA only): the two must agree exactly."""
    from pathlib import Path

    from scalegate.worker.loop import rank_context, train

    converted = []
    real = nn.SyncBatchNorm.convert_sync_batchnorm.__func__
    monkeypatch.setattr(
        nn.SyncBatchNorm,
        "convert_sync_batchnorm",
        classmethod(lambda cls, module, group=None: converted.append(module) or real(cls, module, group)),
    )
    spec = CaseSpec.of(
        strategy="single",
        model="team_syncbn_cnn",
        preset="tiny",
        topology="1x1",
        micro_batch=16,
        steps=1,
        warmup=2,
        workload="teams_models:SyncBatchNormCNN",
        import_paths=(str(Path(__file__).resolve().parent / "assets"),),
    )
    result = train(spec, rank_context(spec))
    assert converted and isinstance(converted[0], nn.Sequential)  # the ranks' model, once at its root
    for kind in ("grads", "params"):
        found = result.grad_check[kind]
        assert found["errors"][found["worst"]]["rel"] == 0.0


def test_the_reference_steps_run_with_deterministic_fp32_cudnn_on_cuda_and_restore_the_defaults_after():
    """On CUDA the untimed steps the reference checks use cuDNN's deterministic kernels (a conv's weight gradient
    differed by 1.7e-7 otherwise, and AdamW made that 5e-3 to 0.12 in parameters on an H100) without TF32 (the
    compiled resnet's gradients came out 6.7% from the eager reference with it on an H200); the measured steps get
    the defaults back. Only flags change, so a CPU machine can check it with a cuda device object."""
    from scalegate.worker import device

    cudnn = torch.backends.cudnn
    before = cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32
    cudnn.benchmark, cudnn.allow_tf32 = True, True
    try:
        with device.deterministic_kernels(torch.device("cuda", 0)):
            assert (cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32) == (True, False, False)
        assert (cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32) == (before[0], True, True)
        with device.deterministic_kernels(torch.device("cpu")):
            assert (cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32) == (before[0], True, True)
    finally:
        cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32 = before
