"""Models as teams write them, registered through the workload API from a directory of their own.

tests/test_models_as_written.py copies this module outside the repository and runs it there. None of these
models was changed for scalegate: a TransformerEncoder classifier and a MultiheadAttention model returning
``{"logits": ...}`` (the key part of their attention's input bias has a true gradient of 0), a Conv-BatchNorm-ReLU
CNN (per-rank batch statistics; its conv biases before BatchNorm have a true gradient of 0), and a nanoGPT-style
decoder with tied input and output embeddings returning ``(logits, loss)``. Each workload only adds deterministic
data and, where a pipeline may cut it, split points.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from scalegate import Preset, Workload

# The tests run ~16 steps at AdamW's lr 1e-3: the loss must fall below 80% of its start by then (measured on one
# process: 0.6-0.7), not the built-ins' 70% over their ~25
CONVERGED = 0.8


def tokens_by_class(seed: int, n: int, seq: int, vocab: int, classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences whose tokens come mostly from their class's own band of the vocabulary: learnable in a few steps."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(classes, (n,), generator=gen)
    band = vocab // classes
    tokens = labels[:, None] * band + torch.randint(band, (n, seq), generator=gen)
    noise = torch.rand(n, seq, generator=gen) < 0.2
    tokens[noise] = torch.randint(vocab, (int(noise.sum()),), generator=gen)
    return tokens, labels


# --- nn.TransformerEncoder classifier: embedding, 2 layers, mean-pool, linear head ------------------------------


class EncoderClassifier(nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, layers: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=2 * width, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(self.embed(tokens)).mean(dim=1))


class Encoder(Workload):
    name = "team_encoder"
    presets = {
        "tiny": Preset(
            micro_batch=16,
            dims={"vocab": 64, "width": 32, "heads": 4, "layers": 2, "classes": 4},
            convergence_fraction=CONVERGED,
        ),
        "small": Preset(micro_batch=32, dims={"vocab": 256, "width": 128, "heads": 4, "layers": 4, "classes": 4}),
    }

    def build_model(self) -> nn.Module:
        return EncoderClassifier(**self.preset.dims)

    def dataset(self):
        d = self.preset.dims
        return tokens_by_class(self.seed, self.preset.dataset_size, 16, d["vocab"], d["classes"])


# --- Conv-BatchNorm-ReLU x2 CNN, as vision code is written --------------------------------------------------------


def conv_bn_cnn(channels: int, classes: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(1, channels, 3, padding=1),
        nn.BatchNorm2d(channels),
        nn.ReLU(),
        nn.Conv2d(channels, 2 * channels, 3, padding=1),
        nn.BatchNorm2d(2 * channels),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(32 * channels, classes),
    )


def images_by_class(seed: int, n: int, side: int, classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy copies of one random template per class."""
    gen = torch.Generator().manual_seed(seed)
    templates = torch.randn(classes, 1, side, side, generator=gen)
    labels = torch.randint(classes, (n,), generator=gen)
    return templates[labels] + 0.5 * torch.randn(n, 1, side, side, generator=gen), labels


class BatchNormCNN(Workload):
    name = "team_bn_cnn"
    presets = {
        "tiny": Preset(micro_batch=16, dims={"channels": 8, "classes": 4, "side": 12}, convergence_fraction=CONVERGED),
        "small": Preset(micro_batch=64, dims={"channels": 32, "classes": 10, "side": 28}),
    }
    split_points = ("2",)  # after the first Conv-BatchNorm-ReLU

    def build_model(self) -> nn.Module:
        return conv_bn_cnn(self.preset.dims["channels"], self.preset.dims["classes"])

    def dataset(self):
        d = self.preset.dims
        return images_by_class(self.seed, self.preset.dataset_size, d["side"], d["classes"])

    def pipeline_stages(self, model: nn.Module, stages: int) -> list[nn.Module]:
        assert self.pipeline_cuts(stages) == ("2",)
        return [model[:3], model[3:]]  # slices of a Sequential hold the same modules


class SyncBatchNormCNN(BatchNormCNN):
    name = "team_syncbn_cnn"
    sync_batchnorm = True


# --- nn.MultiheadAttention model returning {"logits": ...}, as Hugging Face models return ModelOutput ------------


class AttentionClassifier(nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.embed(tokens)
        attended, _ = self.attn(h, h, h, need_weights=False)
        return {"logits": self.head(self.norm(h + attended).mean(dim=1))}


class Attention(Workload):
    name = "team_attention"
    presets = {
        "tiny": Preset(
            micro_batch=16, dims={"vocab": 64, "width": 64, "heads": 4, "classes": 4}, convergence_fraction=CONVERGED
        ),
        "small": Preset(micro_batch=32, dims={"vocab": 256, "width": 128, "heads": 8, "classes": 4}),
    }

    def build_model(self) -> nn.Module:
        return AttentionClassifier(**self.preset.dims)

    def dataset(self):
        d = self.preset.dims
        return tokens_by_class(self.seed, self.preset.dataset_size, 16, d["vocab"], d["classes"])


# --- nanoGPT-style decoder: tied input and output embeddings, forward(idx, targets=None) -> (logits, loss) --------


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int) -> None:
        super().__init__()
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(vocab_size, n_embd),
                wpe=nn.Embedding(block_size, n_embd),
                h=nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)]),
                ln_f=nn.LayerNorm(n_embd),
            )
        )
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT does
        self.apply(self._init_weights)
        for name, param in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


class _Embeddings(nn.Module):
    """Pipeline stage 0's first unit: the same wte and wpe modules as the model's."""

    def __init__(self, transformer: nn.ModuleDict) -> None:
        super().__init__()
        self.wte, self.wpe = transformer.wte, transformer.wpe

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))


class NanoGPT(Workload):
    name = "team_nanogpt"
    presets = {
        "tiny": Preset(
            micro_batch=8,
            dims={"vocab_size": 64, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 64},
            convergence_fraction=CONVERGED,
        ),
        "small": Preset(
            micro_batch=16, dims={"vocab_size": 512, "block_size": 64, "n_layer": 4, "n_head": 4, "n_embd": 128}
        ),
    }
    split_points = ("transformer.h.0",)

    def build_model(self) -> nn.Module:
        return GPT(**self.preset.dims)

    def dataset(self):
        """Each sequence walks one fixed random permutation of the vocabulary: a token predicts the next."""
        d, n = self.preset.dims, self.preset.dataset_size
        gen = torch.Generator().manual_seed(self.seed)
        successor = torch.randperm(d["vocab_size"], generator=gen)
        tokens = torch.empty(n, d["block_size"] + 1, dtype=torch.long)
        tokens[:, 0] = torch.randint(d["vocab_size"], (n,), generator=gen)
        for t in range(1, d["block_size"] + 1):
            tokens[:, t] = successor[tokens[:, t - 1]]
        return tokens[:, :-1], tokens[:, 1:]  # the targets are the inputs shifted, as nanoGPT's get_batch

    def pipeline_stages(self, model: nn.Module, stages: int) -> list[nn.Module]:
        assert self.pipeline_cuts(stages) == ("transformer.h.0",)
        t = model.transformer
        return [nn.Sequential(_Embeddings(t), t.h[0]), nn.Sequential(*t.h[1:], t.ln_f, model.lm_head)]
