"""The pytest side's look at a model before its launch (fixtures/probe.py, harness/scalegate/plan/probe.py), and what the
ranks and the checks do with it (harness/scalegate/measure/gradcheck.py, harness/scalegate/checks/agreement.py). In process, no launch.

- Elements with a true gradient of 0 are found in float64 (float32 where the model refuses, saying so): the key
  part of an attention's input bias, a conv bias before BatchNorm; nothing else of an ordinary model.
- The ranks leave them out of agreement, the failure text lists them.
- The default loss reads a tensor, a tuple or list's first element, a mapping's or ModelOutput's logits; any other
  output fails before a launch with a HINT to define ``loss()``, which gets the raw output.
"""

from __future__ import annotations

import importlib.util
from typing import ClassVar

import pytest
import torch
from torch import nn

from scalegate import Preset, Workload
from scalegate.checks import agreement
from scalegate.contract.errors import SpecError
from scalegate.contract.results import RankResult, aggregate
from scalegate.contract.spec import CaseSpec
from scalegate.measure import gradcheck
from scalegate.plan import probe as plan_probe
from scalegate.workloads import outputs, probe


class _Tokens(Workload):
    name = "probe_tokens"
    presets: ClassVar = {"tiny": Preset(micro_batch=8, dataset_size=64)}
    wrap: ClassVar = staticmethod(lambda logits: logits)

    def build_model(self) -> nn.Module:
        return _Attention(type(self).wrap)

    def dataset(self):
        gen = torch.Generator().manual_seed(self.seed)
        tokens = torch.randint(32, (64, 6), generator=gen)
        return tokens, tokens[:, 0] % 3


class _Attention(nn.Module):
    def __init__(self, wrap) -> None:
        super().__init__()
        self.embed = nn.Embedding(32, 16)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = nn.Linear(16, 3)
        self.wrap = wrap

    def forward(self, tokens):
        h = self.embed(tokens)
        return self.wrap(self.head(self.attn(h, h, h, need_weights=False)[0].mean(1)))


class _ConvBN(_Tokens):
    name = "probe_conv_bn"

    def build_model(self) -> nn.Module:
        return nn.Sequential(nn.Conv1d(1, 4, 3), nn.BatchNorm1d(4), nn.ReLU(), nn.Flatten(), nn.Linear(16, 3))

    def dataset(self):
        gen = torch.Generator().manual_seed(self.seed)
        return torch.randn(64, 1, 6, generator=gen), torch.randint(3, (64,), generator=gen)


def test_the_probe_finds_the_key_bias_and_the_conv_bias_before_batchnorm_and_nothing_else():
    found = probe.probe(_Tokens("tiny", 0))
    assert found["dtype"] == "float64" and found["why"] == ""
    # the key third; not the embedding rows of tokens the probe's batches lack (exactly 0: nothing reached them)
    assert found["params"] == {"attn.in_proj_bias": {"numel": 48, "ranges": [[16, 32]]}}
    assert probe.probe(_ConvBN("tiny", 0))["params"] == {"0.bias": {"numel": 4, "ranges": [[0, 4]]}}


def test_elements_nothing_reaches_stay_compared():
    """Rows of tokens the data lacks get exactly 0 in every process, and a real gradient once the data has them."""

    class HalfVocabulary(_Tokens):
        def dataset(self):
            tokens, labels = super().dataset()
            return tokens % 16, labels

    model = HalfVocabulary("tiny", 0).build_model()
    x, y = HalfVocabulary("tiny", 0).global_batch(0, 8)
    nn.functional.cross_entropy(model(x), y).backward()
    assert (model.embed.weight.grad[16:] == 0).all()  # rows 16..31: nothing reached them
    assert "embed.weight" not in probe.probe(HalfVocabulary("tiny", 0))["params"]


def test_a_model_that_refuses_float64_is_probed_in_float32_and_says_so():
    class Float32Only(_ConvBN):
        def build_model(self):
            model = super().build_model()
            model.register_forward_pre_hook(lambda m, args: _refuse(args[0]))
            return model

    found = probe.probe(Float32Only("tiny", 0))
    assert found["dtype"] == "float32" and "the model refused float64 (TypeError: float32 only" in found["why"]
    assert list(found["params"]) == ["0.bias"]


def _refuse(x: torch.Tensor) -> None:
    if x.dtype == torch.float64:
        raise TypeError("float32 only")


def test_a_model_too_large_for_a_float64_copy_is_not_probed(monkeypatch):
    monkeypatch.setattr(probe, "MAX_PARAMETERS", 100)
    found = probe.probe(_Tokens("tiny", 0))
    assert found["params"] == {} and found["why"].startswith("not probed: 1,651 parameters is above the probe's 100")


@pytest.mark.parametrize(
    "wrap",
    [
        lambda logits: (logits, None),  # nanoGPT without targets
        lambda logits: [logits, logits.sum()],
        lambda logits: {"logits": logits, "hidden": None},
    ],
    ids=["tuple", "list", "dict"],
)
def test_the_default_loss_reads_tuples_lists_and_mappings(wrap):
    logits, target = torch.randn(4, 3), torch.tensor([0, 1, 2, 0])
    assert torch.equal(
        Workload.loss(_Tokens("tiny", 0), wrap(logits), target), nn.functional.cross_entropy(logits, target)
    )


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_the_default_loss_reads_a_model_output():
    from transformers.modeling_outputs import CausalLMOutput

    logits, target = torch.randn(2, 5, 7), torch.randint(7, (2, 5))  # (B, T, V) against (B, T): classes last
    want = nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())
    assert torch.equal(Workload.loss(_Tokens("tiny", 0), CausalLMOutput(logits=logits), target), want)


class _Odd:
    pass


@pytest.mark.parametrize(
    "wrap, says",
    [
        (lambda logits: _Odd(), "returned an object of type test_probe._Odd"),
        (lambda logits: {"scores": logits}, "returned a dict with keys ['scores']"),
        (lambda logits: (None, logits), "returned a tuple of 2 (NoneType, Tensor)"),
    ],
    ids=["object", "mapping-without-logits", "tuple-without-a-first-tensor"],
)
def test_an_output_the_default_loss_cannot_read_fails_on_the_pytest_side_with_a_hint(wrap, says):
    class Odd(_Tokens):
        pass

    Odd.wrap = staticmethod(wrap)
    with pytest.raises(SpecError) as err:
        probe.probe(Odd("tiny", 0))
    assert f"workload 'probe_tokens': the model {says}" in err.value.message
    assert "define loss(self, output, target) in the workload" in err.value.hint


def test_a_loss_the_workload_defines_gets_the_raw_output():
    seen = []

    class Own(_Tokens):
        wrap = staticmethod(lambda logits: _Box(logits))

        def loss(self, output, target):
            seen.append(type(output))
            return nn.functional.cross_entropy(output.logits, target)

    assert not Own.default_loss() and _Tokens.default_loss()
    assert probe.probe(Own("tiny", 0))["dtype"] == "float64" and set(seen) == {_Box}


class _Box:
    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits


def test_the_pytest_side_probes_once_and_stops_a_case_before_its_launch(monkeypatch):
    calls = []
    real = probe.probe
    monkeypatch.setattr(probe, "probe", lambda w: calls.append(w) or real(w))
    monkeypatch.setattr(plan_probe, "_FOUND", {})
    spec = CaseSpec.of(
        strategy="ddp",
        model="probe_tokens",
        preset="tiny",
        topology="1x2",
        micro_batch=8,
        workload="test_probe:_Tokens",
    )
    first = plan_probe.prepare(spec)
    assert first.zero_grad["params"]["attn.in_proj_bias"]["ranges"] == [[16, 32]]
    assert plan_probe.prepare(spec.replace(strategy="fsdp")).zero_grad == first.zero_grad and len(calls) == 1
    assert plan_probe.prepare(spec.replace(grad_check=False)).zero_grad == {}  # nothing compared: nothing to say


def test_the_ranks_leave_the_elements_out_and_count_them():
    ref = {"b": torch.tensor([1.0, 2.0, 3.0, 4.0]), "dead": torch.tensor([1e-9, -1e-9])}
    noisy = {"b": torch.tensor([1.0, 2.5, 3.0, 4.0]), "dead": torch.tensor([-1e-9, 1e-9])}  # noise on the zeros
    zero = {"params": {"b": {"numel": 4, "ranges": [[1, 2]]}, "dead": {"numel": 2, "ranges": [[0, 2]]}}}
    assert gradcheck.compare(noisy, ref)["worst"] == "dead"  # relative 2: the false alarm
    found = gradcheck.compare(noisy, ref, zero)
    assert found["errors"] == {"b": {"abs": 0.0, "rel": 0.0, "scale": 4.0}} and found["worst"] == "b"
    assert found["not_compared"] == {"b": 1, "dead": 2}
    wrong = gradcheck.compare({**noisy, "b": torch.tensor([1.0, 2.0, 3.1, 4.0])}, ref, zero)
    assert wrong["errors"]["b"]["rel"] == pytest.approx(0.1 / 4)  # every other element is still compared


def test_a_failure_lists_the_parameters_left_out():
    zero = {
        "dtype": "float64",
        "why": "",
        "params": {"enc.in_proj_bias": {"numel": 96, "ranges": [[32, 64]]}, "0.bias": {"numel": 8, "ranges": [[0, 8]]}},
    }
    spec = CaseSpec.of(strategy="ddp", model="m", preset="tiny", topology="1x2", micro_batch=8, steps=1, zero_grad=zero)
    bad = {"errors": {"w": {"abs": 1.0, "rel": 0.5, "scale": 2.0}}, "worst": "w", "missing": [], "extra": []}
    ranks = [
        RankResult(
            rank=i, world_size=2, node_rank=0, host="h", device="cpu", step_times_s=[0.1], losses=[1.0],
            warmup_losses=[1.0], loss_weight=0.5, grad_check={"grads": bad, "params": bad},
        )
        for i in range(2)
    ]  # fmt: skip
    message = agreement.agreement(aggregate(spec, ranks))
    assert message.splitlines()[-1] == (
        "2 parameters with a true gradient of 0 not compared: enc.in_proj_bias (32 of 96 elements), 0.bias "
        "(found in float64 on the pytest side before the launch)"
    )
    assert outputs.HINT  # the hint the output check gives is the module's own
