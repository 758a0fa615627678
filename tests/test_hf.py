"""``hf:<model_type>`` workloads (fixtures/hf.py): Hugging Face models from a config, random weights, no hub.

In this process: names, presets, the task each model type gets, the generic dims written to each config's own
fields, deterministic data, a forward/backward and a few learning steps for GPT-2 and Llama, the frozen
zero-gradient parameters, pipeline cuts of rotary decoders, skips and usage errors. One real torchrun job (``slow``): GPT-2 under FSDP on 1x2
against a single process. The whole sweep (ddp, fsdp, deepspeed-zero3 for several model types) is behind
`pytest -m nightly`.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytest.importorskip("transformers")

from scalegate import workloads  # noqa: E402
from scalegate.checks import agreement  # noqa: E402
from scalegate.contract.errors import SpecError  # noqa: E402
from scalegate.contract.spec import CaseSpec  # noqa: E402
from scalegate.workloads import hf, hf_config, hf_tasks, loader  # noqa: E402


def _model(model_type: str, seed: int = 0):
    workload = hf.hf_workload(model_type)("tiny", seed)
    torch.manual_seed(seed)
    return workload, workload.build_model()


def test_the_name_is_made_for_test_ids_and_the_loader_finds_the_class():
    assert hf.hf_workload("gpt2").name == "hf_gpt2"
    assert hf.hf_workload("xlm-roberta").name == "hf_xlm_roberta"
    cls = workloads.load("hf:gpt2", where="--scaling-models hf:gpt2")
    assert cls.name == "hf_gpt2" and cls.model_type == "gpt2" and workloads.load("hf:gpt2") is cls
    spec = CaseSpec.of(
        strategy="ddp", model="hf_gpt2", preset="tiny", topology="1x2", micro_batch=8, workload="hf:gpt2"
    )
    assert workloads.resolve(spec) is cls and spec.case_id == "ddp-hf_gpt2-1x2"


def test_presets_tiny_and_small_are_generic_and_full_is_the_configs_own_size():
    cls = hf.hf_workload("gpt2")
    assert set(cls.presets) == {"tiny", "small", "full"}
    tiny = cls.presets["tiny"].dims
    assert (tiny["layers"], tiny["hidden"], tiny["heads"], tiny["vocab_size"], tiny["seq_len"]) == (2, 64, 4, 512, 32)
    full = cls.presets["full"].dims  # transformers' GPT2Config defaults: gpt2 (124M)
    assert (full["layers"], full["hidden"], full["heads"], full["vocab_size"], full["seq_len"]) == (
        12,
        768,
        12,
        50257,
        1024,
    )
    llama = hf.hf_workload("llama").presets["full"].dims
    assert (llama["hidden"], llama["intermediate"], llama["seq_len"]) == (4096, 11008, 1024)


@pytest.mark.parametrize(
    "model_type, task",
    [
        ("gpt2", "causal_lm"),
        ("llama", "causal_lm"),
        ("bert", "masked_lm"),
        ("bart", "masked_lm"),
        ("t5", "classification"),
    ],
)
def test_the_task_follows_the_models_heads(model_type, task):
    assert hf.hf_workload(model_type).task == task


def test_generic_dims_land_in_each_configs_own_fields_with_dropout_off():
    d = hf.hf_workload("gpt2").presets["tiny"].dims
    gpt2 = hf_config.build_config("gpt2", d)
    assert (gpt2.n_embd, gpt2.n_layer, gpt2.n_head, gpt2.n_inner, gpt2.vocab_size) == (64, 2, 4, 256, 512)
    assert gpt2.n_positions >= d["seq_len"] and gpt2.resid_pdrop == gpt2.embd_pdrop == gpt2.attn_pdrop == 0.0
    assert gpt2.bos_token_id < hf_config.DATA_START and gpt2.eos_token_id < hf_config.DATA_START
    llama = hf_config.build_config("llama", d)
    assert (llama.num_key_value_heads, llama.head_dim, llama.intermediate_size) == (2, 16, 256)
    bart = hf_config.build_config("bart", d)
    assert (
        bart.d_model,
        bart.encoder_layers,
        bart.decoder_layers,
        bart.decoder_attention_heads,
        bart.decoder_ffn_dim,
    ) == (64, 2, 2, 4, 256)
    assert bart.dropout == bart.encoder_layerdrop == 0.0
    t5 = hf_config.build_config("t5", d)
    assert (t5.d_model, t5.d_kv, t5.d_ff, t5.num_decoder_layers, t5.dropout_rate) == (64, 16, 256, 2, 0.0)
    assert t5.decoder_start_token_id == t5.pad_token_id  # an encoder-decoder's decoder starts somewhere
    assert hf_config.build_config("gemma", d).head_dim == 256  # set apart from hidden / heads: kept
    assert hf_config.build_config("gptj", d).rotary_dim == 4  # 64 of 256 in GPT-J's head, 4 of 16 here


@pytest.mark.parametrize("model_type", ["gpt2", "bert", "t5"])
def test_data_is_deterministic_learnable_and_the_same_at_every_world_size(model_type):
    cls = hf.hf_workload(model_type)
    x, y = cls("tiny", 3).global_batch(0, 16)
    x2, y2 = cls("tiny", 3).global_batch(0, 32)
    assert torch.equal(x2[:16], x) and torch.equal(y2[:16], y)
    assert not torch.equal(cls("tiny", 4).global_batch(0, 16)[0], x), "the seed must change the data"
    assert x.shape == (16, 32) and x.min() >= 0 and x.max() < 512
    if cls.task == "causal_lm":
        assert torch.equal(x[:, 1:], y[:, :-1])  # next-token targets
        assert x.min() >= hf_config.DATA_START, "no special tokens in the data"
    if cls.task == "masked_lm":  # the same number of masked positions in every row: every sample weighs the same
        counts = (y != hf_tasks.IGNORE).sum(dim=1)
        assert (counts == counts[0]).all() and counts[0] > 0
        assert (x[y != hf_tasks.IGNORE] == hf_config.MASK).all()


@pytest.mark.parametrize("model_type", ["gpt2", "llama"])
def test_gpt2_and_llama_train_on_cpu(model_type):
    workload, model = _model(model_type)
    x, y = workload.global_batch(0, 4)
    out = model(x)
    assert out.shape == (4, 32, 512)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for step in range(6):
        x, y = workload.global_batch(step, 8)
        optimizer.zero_grad()
        loss = workload.loss(model(x), y)
        loss.backward()
        assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
        optimizer.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0] and all(map(torch.isfinite, map(torch.tensor, losses))), losses


def test_the_same_seed_builds_the_same_weights_whether_or_not_the_probe_ran():
    """The zero-gradient probe builds a model of its own, under its own random state."""
    hf._DEAD_CACHE.clear()
    _, first = _model("llama", seed=5)  # probe runs inside this build
    _, second = _model("llama", seed=5)  # probe cached
    for (name, a), (_, b) in zip(first.named_parameters(), second.named_parameters()):
        assert torch.equal(a, b), name


def test_zero_gradient_biases_are_frozen_and_nothing_else():
    _, bert = _model("bert")
    frozen = sorted(n for n, p in bert.named_parameters() if not p.requires_grad)
    assert frozen == [f"model.bert.encoder.layer.{i}.attention.self.key.bias" for i in range(2)]
    _, gpt2 = _model("gpt2")
    assert all(p.requires_grad for p in gpt2.parameters())


def test_fsdp_units_are_the_layer_lists():
    workload, gpt2 = _model("gpt2")
    assert workload.fsdp_blocks(gpt2) == list(gpt2.model.transformer.h)
    workload, bart = _model("bart")
    assert workload.fsdp_blocks(bart) == [*bart.model.model.encoder.layers, *bart.model.model.decoder.layers]


def test_a_model_type_without_a_text_head_skips_with_the_reason():
    cls = workloads.load("hf:vit")
    assert cls.name == "hf_vit" and "no masked-LM, causal-LM" in cls.unavailable()


def test_a_model_that_cannot_be_built_skips_with_the_error(monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("needs pixel_values\nsecond line")

    monkeypatch.setattr(hf_tasks, "build", broken)
    cls = hf.hf_workload("gpt2")  # a fresh class: the trial runs once per class
    reason = cls.unavailable()
    assert reason.startswith("hf:gpt2: GPT2LMHeadModel cannot be built") and "ValueError: needs pixel_values" in reason
    assert "second line" not in reason


def test_an_unknown_model_type_is_a_usage_error_with_a_hint():
    with pytest.raises(SpecError, match="has no model type 'gtp2'") as err:
        workloads.load("hf:gtp2", where="--scaling-models hf:gtp2")
    assert "hf:gpt2" in err.value.hint and "CONFIG_MAPPING" in err.value.hint


def test_without_transformers_the_cases_skip_naming_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "transformers" else real(n, *a))
    cls = hf.hf_workload("gpt2")
    assert cls.name == "hf_gpt2" and "'transformers', which is not installed" in cls.unavailable()
    loader.validate(cls, "hf:gpt2")  # still a well-formed workload: its cases exist and skip


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_rotary_decoders_cut_into_pipeline_stages_that_chain_to_the_model(model_type):
    workload, model = _model(model_type)
    assert workload.supports_pipeline() and workload.max_pipeline_stages() == 3
    x, _ = workload.global_batch(0, 4)
    with torch.no_grad():
        want = model(x)  # the transformers forward
        params = {id(p) for p in model.parameters()}
        for count in (1, 2, 3):
            stages = workload.pipeline_stages(model, count)
            out = x
            for stage in stages:
                assert {id(p) for p in stage.parameters()} <= params, "stages must reuse the model's parameters"
                out = stage(out)
            assert len(stages) == count and torch.equal(out, want)


def test_models_whose_forward_does_more_than_the_chain_have_no_pipeline_cases():
    assert not hf.hf_workload("gpt2").supports_pipeline()  # not a rotary decoder; tied embeddings
    assert not hf.hf_workload("gemma").supports_pipeline()  # scales its embeddings in its forward


# --- real torchrun jobs ------------------------------------------------------------------------


def _run(tmp_path, agents, model_type: str, strategy: str, steps: int, warmup: int):
    from scalegate.launch import run_case

    name = hf.hf_workload(model_type).name
    spec = CaseSpec.of(
        strategy=strategy,
        model=name,
        preset="tiny",
        topology="1x2",
        micro_batch=8,
        steps=steps,
        warmup=warmup,
        workload=f"hf:{model_type}",
    )
    return run_case(spec, tmp_path / spec.case_id, agents=agents)


@pytest.mark.slow
@pytest.mark.nightly  # nightly: the hf matrix is nightly
def test_fsdp_gpt2_on_two_ranks_agrees_with_a_single_process(tmp_path, agents):
    result = _run(tmp_path, agents, "gpt2", "fsdp", steps=2, warmup=2)
    assert agreement.agreement(result) is None and agreement.loss_curve(result) is None
    report = result.ranks[0].grad_check["grads"]
    assert report["worst"] and report["errors"][report["worst"]]["rel"] < 2e-5


@pytest.mark.slow
@pytest.mark.nightly
@pytest.mark.parametrize(
    "model_type, strategy",
    [(m, s) for m in ("gpt2", "llama", "bert", "opt") for s in ("ddp", "fsdp", "deepspeed-zero3")]
    + [("llama", "pipeline-gpipe")],
)
def test_heavy_agreement_and_convergence(tmp_path, agents, model_type, strategy):
    result = _run(tmp_path, agents, model_type, strategy, steps=20, warmup=5)
    assert agreement.agreement(result) is None
    assert agreement.loss_curve(result) is None
    assert agreement.convergence(result) is None
