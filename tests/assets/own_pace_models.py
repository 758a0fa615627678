"""Two ordinary models with data of their own, at the default convergence bar.

A Conv-BatchNorm CNN and a MultiheadAttention model returning ``{"logits": ...}``, each with its own synthetic
10-class data that a model learns, but slower than the built-in workloads' data: in a case's 21 steps their loss
falls by a few percent, not to 70% of its start. Their presets leave ``convergence_fraction`` at its default, so
the convergence check is the one for a workload of your own (harness/scalegate/checks/agreement.py ``_fell``).

``BlindCNN`` is the fault: the same CNN on data it cannot learn (the class is a random linear function of every
pixel, which its global average pooling cannot see), so its loss stays flat around ln 10 with batch-to-batch noise.
"""

from __future__ import annotations

import torch
from torch import nn

from scalegate import Preset, Workload


class ConvBN(nn.Module):
    def __init__(self, channels: int, classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.BatchNorm2d(2 * channels),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Linear(2 * channels, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images))


class OwnCNN(Workload):
    name = "own_cnn"
    presets = {
        "tiny": Preset(micro_batch=16, dims={"channels": 16, "classes": 10}),
        "small": Preset(micro_batch=64, dims={"channels": 32, "classes": 10}),
    }

    def build_model(self) -> nn.Module:
        return ConvBN(**self.preset.dims)

    def dataset(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Noisy copies of one random colour texture per class, the noise as strong as the texture."""
        gen = torch.Generator().manual_seed(self.seed)
        templates = torch.randn(10, 3, 16, 16, generator=gen)
        labels = torch.randint(10, (self.preset.dataset_size,), generator=gen)
        noise = torch.randn(self.preset.dataset_size, 3, 16, 16, generator=gen)
        return templates[labels] + noise, labels


class BlindCNN(OwnCNN):
    name = "blind_cnn"

    def dataset(self) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed)
        images = torch.randn(self.preset.dataset_size, 3, 16, 16, generator=gen)
        teacher = torch.randn(3 * 16 * 16, 10, generator=gen)
        return images, (images.flatten(1) @ teacher).argmax(1)


class AttentionPool(nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.head = nn.Linear(width, classes)

    def forward(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.embed(tokens)
        attended, _ = self.attn(h, h, h, need_weights=False)
        return {"logits": self.head((h + attended).mean(dim=1))}


class OwnAttention(Workload):
    name = "own_attention"
    presets = {
        "tiny": Preset(micro_batch=16, dims={"vocab": 100, "width": 32, "heads": 4, "classes": 10}),
        "small": Preset(micro_batch=32, dims={"vocab": 100, "width": 64, "heads": 4, "classes": 10}),
    }

    def build_model(self) -> nn.Module:
        return AttentionPool(**self.preset.dims)

    def dataset(self) -> tuple[torch.Tensor, torch.Tensor]:
        """24 random tokens, a quarter of them from the class's own tenth of the vocabulary."""
        gen = torch.Generator().manual_seed(self.seed)
        n = self.preset.dataset_size
        labels = torch.randint(10, (n,), generator=gen)
        tokens = torch.randint(100, (n, 24), generator=gen)
        says = torch.rand(n, 24, generator=gen) < 0.25
        tokens[says] = (labels[:, None] * 10 + torch.randint(10, (n, 24), generator=gen))[says]
        return tokens, labels
