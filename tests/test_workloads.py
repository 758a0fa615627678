"""Workloads: they build, hand out world-size-independent global batches, learn, and read real data.

Everything runs in this process (no torchrun): small models, a few optimizer steps. The readers are
tested on sample files written here: MNIST idx (gzip and plain), SQuAD v1.1 and v2.0 JSON, and a
tiny WordPiece tokenizer directory.
"""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import pytest
import torch

from scalegate import workloads
from scalegate.contract.errors import SpecError
from scalegate.workloads import data, squad

NEW = ("rnn_mnist", "resnet", "bert_qa")


def _model(name: str, preset: str = "tiny", seed: int = 0, data_dir: str | None = None):
    workload = workloads.get(name)(preset, seed, data_dir)
    torch.manual_seed(seed)
    return workload, workload.build_model()


@pytest.mark.parametrize("name", NEW)
def test_registered_with_three_presets(name):
    assert name in workloads.names()
    assert set(workloads.get(name).presets) >= {"tiny", "small", "full"}


@pytest.mark.parametrize("name", NEW)
def test_builds_and_maps_a_batch_to_a_loss(name):
    workload, model = _model(name)
    x, y = workload.global_batch(0, 4)
    loss = workload.loss(model(x), y)
    assert loss.dim() == 0 and torch.isfinite(loss)


@pytest.mark.parametrize("name", NEW)
def test_global_batch_is_the_same_for_every_world_size(name):
    """Every rank builds its own workload; at any world size the global batch starts with the same samples."""
    mb = workloads.get(name).presets["tiny"].micro_batch
    x1, y1 = workloads.get(name)("tiny", 7).global_batch(0, mb)
    for world in (2, 4):
        rank_copies = [workloads.get(name)("tiny", 7) for _ in range(2)]
        (xa, ya), (xb, yb) = (w.global_batch(0, mb * world) for w in rank_copies)
        assert torch.equal(xa, xb) and torch.equal(ya, yb), "ranks must see the same global batch"
        assert torch.equal(xa[:mb], x1) and torch.equal(ya[:mb], y1)
    other = workloads.get(name)("tiny", 8).global_batch(0, mb)[0]
    assert not torch.equal(other, x1), "the seed must change the data"


@pytest.mark.parametrize("name", NEW)
def test_a_few_optimizer_steps_reduce_the_loss(name):
    workload, model = _model(name)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for step in range(8):
        x, y = workload.global_batch(step, 16)
        optimizer.zero_grad()
        loss = workload.loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    assert min(losses[-2:]) < losses[0], losses


@pytest.mark.parametrize("name", NEW)
def test_pipeline_stages_chain_to_the_model(name):
    workload, model = _model(name)
    x, _ = workload.global_batch(0, 4)
    want = model(x)
    params = {id(p) for p in model.parameters()}
    for count in range(1, workload.max_pipeline_stages() + 1):
        stages = workload.pipeline_stages(model, count)
        assert len(stages) == count
        out = x
        for stage in stages:
            assert {id(p) for p in stage.parameters()} <= params, "stages must reuse the model's parameters"
            out = stage(out)
        assert torch.equal(out, want)


def test_resnet_full_is_resnet50_and_uses_groupnorm():
    workload = workloads.get("resnet")("full", 0)
    model = workload.build_model()
    assert [len(getattr(model, f"layer{i}")) for i in range(1, 5)] == [3, 4, 6, 3]
    assert model.head.fc.in_features == 2048
    assert 23_000_000 < sum(p.numel() for p in model.parameters()) < 24_000_000  # 25.6 M less the 1000-way fc
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())


def test_bert_qa_matches_the_transformers_forward_with_padding():
    """The unit chain computes what BertForQuestionAnswering.forward does, masks included."""
    workload, model = _model("bert_qa")
    x, _ = workload.global_batch(0, 3)
    x[:, 40:] = 0
    x[:, 39] = 2
    keep = (x != 0).long()
    is_sep = (x == 2).long()
    segment = ((is_sep.cumsum(1) - is_sep) > 0).long()
    ref = model.qa(input_ids=x, attention_mask=keep, token_type_ids=segment)
    out = model(x)
    torch.testing.assert_close(out[:, 0], ref.start_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[:, 1], ref.end_logits, atol=1e-5, rtol=1e-5)
    config = model.qa.config
    assert config.hidden_dropout_prob == 0 and config.attention_probs_dropout_prob == 0


def test_bert_qa_declares_transformers_and_skips_without_it(monkeypatch):
    import importlib.util

    cls = workloads.get("bert_qa")
    assert "transformers" in cls.packages and cls.unavailable() is None
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "transformers" else real(n, *a))
    assert "transformers" in cls.unavailable()
    assert workloads.get("resnet").unavailable() is None


def test_synthetic_squad_targets_point_at_the_markers():
    vocab = squad.Vocab(size=100)
    ids, targets = squad.synthetic_squad(0, 50, 64, vocab)
    rows = torch.arange(50)
    assert (ids[rows, targets[:, 0]] == vocab.start).all() and (ids[rows, targets[:, 1]] == vocab.end).all()
    assert (targets[:, 0] < targets[:, 1]).all() and (ids[:, 0] == vocab.cls).all()


# --- readers -----------------------------------------------------------------------------------


def _write_idx(path: Path, magic: int, array: torch.Tensor, compress: bool) -> None:
    raw = struct.pack(f">I{array.dim()}I", magic, *array.shape) + bytes(array.to(torch.uint8).flatten().tolist())
    path.write_bytes(gzip.compress(raw) if compress else raw)


def _mnist_dir(tmp_path: Path, n: int = 12, compress: bool = True) -> Path:
    suffix = ".gz" if compress else ""
    images = torch.arange(n * 28 * 28).remainder(256).reshape(n, 28, 28)
    labels = torch.arange(n).remainder(10)
    _write_idx(tmp_path / f"{data.IMAGES}{suffix}", 0x0803, images, compress)
    _write_idx(tmp_path / f"{data.LABELS}{suffix}", 0x0801, labels, compress)
    return tmp_path


@pytest.mark.parametrize("compress", [True, False])
def test_mnist_reader_parses_idx_files(tmp_path, compress):
    x, y = data.read_mnist(str(_mnist_dir(tmp_path, compress=compress)), limit=10)
    assert x.shape == (10, 1, 28, 28) and x.dtype == torch.float32
    assert y.tolist() == list(range(10))
    pixel = torch.arange(28 * 28).remainder(256)[5].item()
    assert x[0, 0, 0, 5].item() == pytest.approx((pixel / 255 - data.MNIST_MEAN) / data.MNIST_STD)


@pytest.mark.parametrize("name", ["cnn", "rnn_mnist", "resnet"])
def test_image_workloads_train_on_real_mnist_files(tmp_path, name):
    workload, model = _model(name, data_dir=str(_mnist_dir(tmp_path)))
    x, y = workload.global_batch(0, 4)
    assert x.shape == (4, 1, 28, 28) and y.tolist() == [0, 1, 2, 3]
    assert torch.isfinite(workload.loss(model(x), y))


def test_mnist_reader_errors_name_the_file_and_hint(tmp_path):
    with pytest.raises(SpecError, match=r"(?s)train-images-idx3-ubyte not found.*\nHINT: download the MNIST"):
        data.read_mnist(str(tmp_path))
    _mnist_dir(tmp_path)
    (tmp_path / f"{data.IMAGES}.gz").write_bytes(gzip.compress(struct.pack(">I", 0x0801) + b"\0" * 12))
    with pytest.raises(SpecError, match=r"(?s)train-images-idx3-ubyte\.gz: magic number 0x00000801.*HINT"):
        data.read_mnist(str(tmp_path))
    (tmp_path / f"{data.IMAGES}.gz").write_bytes(b"not gzip at all")
    with pytest.raises(SpecError, match=r"(?s)train-images-idx3-ubyte\.gz: cannot read"):
        data.read_mnist(str(tmp_path))
    images = torch.zeros(3, 28, 28)
    raw = struct.pack(">IIII", 0x0803, 12, 28, 28) + bytes(images.to(torch.uint8).flatten().tolist())
    (tmp_path / f"{data.IMAGES}.gz").write_bytes(gzip.compress(raw))  # header says 12, payload holds 3
    with pytest.raises(SpecError, match="truncated"):
        data.read_mnist(str(tmp_path))


VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "where",
    "did",
    "the",
    "cat",
    "sit",
    "?",
    "sat",
    "on",
    "mat",
    ".",
    "a",
    "dog",
    "ran",
    "what",
    "color",
    "is",
    "sky",
    "blue",
    "##s",
]


def _squad_dir(tmp_path: Path, version: str) -> Path:
    tok = tmp_path / "tokenizer"
    tok.mkdir()
    (tok / "vocab.txt").write_text("\n".join(VOCAB) + "\n")  # a bare WordPiece vocabulary, no config
    context = "The cat sat on the mat. A dog ran."
    qas = [
        {
            "id": "1",
            "question": "Where did the cat sit?",
            "answers": [{"text": "on the mat", "answer_start": context.index("on the mat")}],
        }
    ]
    if version == "2.0":
        qas.append({"id": "2", "question": "What color is the sky?", "answers": [], "is_impossible": True})
    doc = {"version": f"v{version}", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}
    (tmp_path / f"train-v{version}.json").write_text(json.dumps(doc))
    return tmp_path


@pytest.mark.parametrize("version", ["1.1", "2.0"])
def test_squad_reader_maps_answers_to_token_spans(tmp_path, version):
    root = _squad_dir(tmp_path, version)
    tokenizer = squad.load_tokenizer(str(root))
    ids, targets = squad.read_squad(str(root), tokenizer, seq_len=32, limit=10)
    assert ids.shape == (2 if version == "2.0" else 1, 32)
    start, end = targets[0].tolist()
    assert tokenizer.decode(ids[0, start : end + 1]) == "on the mat"
    if version == "2.0":
        assert targets[1].tolist() == [0, 0], "an unanswerable question points at [CLS]"


def test_squad_answer_cut_by_truncation_points_at_cls(tmp_path):
    root = _squad_dir(tmp_path, "1.1")
    ids, targets = squad.read_squad(str(root), squad.load_tokenizer(str(root)), seq_len=12, limit=10)
    assert targets[0].tolist() == [0, 0]


def test_bert_qa_trains_on_local_squad_with_the_tokenizers_vocabulary(tmp_path):
    workload, model = _model("bert_qa", data_dir=str(_squad_dir(tmp_path, "2.0")))
    assert model.qa.config.vocab_size == len(VOCAB)
    x, y = workload.global_batch(0, 2)
    assert x.shape == (2, workload.preset.dims["seq_len"])
    loss = workload.loss(model(x), y)
    loss.backward()
    assert torch.isfinite(loss)


def test_squad_reader_errors_name_the_file_and_hint(tmp_path):
    with pytest.raises(SpecError, match=r"(?s)no SQuAD file under .*\nHINT: put SQuAD JSON"):
        squad.find_squad(str(tmp_path))
    with pytest.raises(SpecError, match=r"(?s)tokenizer directory .*tokenizer does not exist.*HINT"):
        squad.load_tokenizer(str(tmp_path))
    (tmp_path / "tokenizer").mkdir()
    with pytest.raises(SpecError, match=r"(?s)cannot load a tokenizer from .*tokenizer.*HINT"):
        squad.load_tokenizer(str(tmp_path))
    (tmp_path / "train-v1.1.json").write_text("{not json")
    with pytest.raises(SpecError, match=r"(?s)train-v1\.1\.json: not readable SQuAD JSON.*HINT"):
        squad.questions(tmp_path / "train-v1.1.json", 5)
    (tmp_path / "train-v1.1.json").write_text(json.dumps({"data": [{"paragraphs": [{"qas": []}]}]}))
    with pytest.raises(SpecError, match=r"(?s)train-v1\.1\.json: no questions found"):
        squad.questions(tmp_path / "train-v1.1.json", 5)
    (tmp_path / "train-v1.1.json").write_text(json.dumps({"data": [{"title": "no paragraphs"}]}))
    with pytest.raises(SpecError, match=r"(?s)train-v1\.1\.json: not SQuAD v1\.1/v2\.0 layout.*'paragraphs'"):
        squad.questions(tmp_path / "train-v1.1.json", 5)


# --- --scaling-data-dir reaches the workers ------------------------------------------------------


def test_data_dir_option_must_be_a_directory(tmp_path):
    import argparse

    from scalegate.plan.option_types import directory

    data_dir = directory("--scaling-data-dir")  # the option's type=: relative paths become absolute for the ranks
    assert data_dir("") is None and data_dir(str(tmp_path)) == str(tmp_path.resolve())
    with pytest.raises(argparse.ArgumentTypeError, match=r"(?s)--scaling-data-dir .*missing is not a directory.*HINT"):
        data_dir(str(tmp_path / "missing"))


@pytest.mark.slow  # two launches: not the fast tier's single ones
@pytest.mark.nightly  # nightly: two launches on real data files
def test_workers_read_the_data_dir_and_report_a_missing_file(tmp_path, agents):
    """A real one-process launch: the worker looks in the data directory and its SpecError comes back."""
    from scalegate.contract.errors import LaunchError
    from scalegate.contract.spec import CaseSpec
    from scalegate.launch import run_case

    spec = CaseSpec.of(
        strategy="single",
        model="rnn_mnist",
        preset="tiny",
        topology="1x1",
        micro_batch=4,
        steps=1,
        warmup=0,
        timeout_s=120,
    )
    empty = tmp_path / "data"
    empty.mkdir()
    with pytest.raises(LaunchError, match=r"(?s)train-images-idx3-ubyte not found under .*data.*download the MNIST"):
        run_case(spec, tmp_path / "bad", data_dir=str(empty), agents=agents)
    result = run_case(spec, tmp_path / "good", data_dir=str(_mnist_dir(empty, n=8)), agents=agents)
    assert len(result.losses) == 1


def test_bert_qa_freezes_only_parameters_whose_gradient_is_identically_zero():
    """Softmax shift invariance: key biases, the QA bias and the last LayerNorm bias get rounding noise only."""
    workload, model = _model("bert_qa")
    frozen = sorted(n for n, p in model.named_parameters() if not p.requires_grad)
    assert frozen == [
        "qa.bert.encoder.layer.0.attention.self.key.bias",
        "qa.bert.encoder.layer.1.attention.self.key.bias",
        "qa.bert.encoder.layer.1.output.LayerNorm.bias",
        "qa.qa_outputs.bias",
    ]
    for p in model.parameters():
        p.requires_grad_(True)
    x, y = workload.global_batch(0, 16)
    workload.loss(model(x), y).backward()
    grads = {n: float(p.grad.abs().max()) for n, p in model.named_parameters()}
    assert max(grads[n] for n in frozen) < 1e-7 < min(v for n, v in grads.items() if n not in frozen)


def test_matrix_skips_bert_qa_with_the_missing_package_named(monkeypatch):
    import importlib.util

    from scalegate.contract.spec import CaseSpec
    from scalegate.plan import hostinfo, matrix

    host = hostinfo.detect()
    spec = CaseSpec.of(strategy="ddp", model="bert_qa", preset="tiny", topology="1x2", micro_batch=4)
    assert matrix.skip_reason(spec, host) is None
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "transformers" else real(n, *a))
    assert "needs the optional package 'transformers'" in matrix.skip_reason(spec, host)
