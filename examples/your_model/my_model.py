"""A workload of your own: the model, deterministic data, the loss, and where FSDP and a pipeline may cut it.

scalegate imports this module by name in every rank (torchrun processes, maybe on other nodes), so keep the
class at the top level of a module of its own, importable from your repository's root.
"""

from __future__ import annotations

import torch
from torch import nn

from scalegate import Preset, Workload


class Block(nn.Module):
    """A residual MLP block: the unit FSDP shards and a pipeline cuts between."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, features: int, width: int, depth: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Linear(features, width)
        self.blocks = nn.Sequential(*[Block(width) for _ in range(depth)])
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(x)))


class MyMLP(Workload):
    name = "my_mlp"  # the model part of the test ids: ddp-my_mlp-1x2
    presets = {  # --scaling-preset auto picks "tiny" without a GPU, "small" with one
        "tiny": Preset(micro_batch=32, dims={"features": 64, "width": 128, "depth": 4, "classes": 8}),
        "small": Preset(
            micro_batch=64, dims={"features": 256, "width": 512, "depth": 8, "classes": 32}, dataset_size=8192
        ),
        "full": Preset(
            micro_batch=128, dims={"features": 1024, "width": 2048, "depth": 16, "classes": 128}, dataset_size=65536
        ),
    }
    # Pipeline strategies cut only after these modules (in forward order); pipeline_stages() does the cutting.
    split_points = ("blocks.0", "blocks.1", "blocks.2")

    def build_model(self) -> nn.Module:
        return Net(**self.preset.dims)  # torch is seeded before this: every rank builds the same weights

    def dataset(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A learnable task, the same on every rank for the same seed: labels from a fixed random teacher."""
        dims, n = self.preset.dims, self.preset.dataset_size
        gen = torch.Generator().manual_seed(self.seed)
        teacher = torch.randn(dims["features"], dims["classes"], generator=gen)
        inputs = torch.randn(n, dims["features"], generator=gen)
        return inputs, (inputs @ teacher).argmax(dim=1)

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(output, target)  # the default; shown because yours may differ

    def fsdp_blocks(self, model: nn.Module) -> list[nn.Module]:
        # FSDP all-gathers one unit at a time: each block on its own, not the whole Sequential at once
        return [model.embed, *model.blocks, model.head]

    def pipeline_stages(self, model: nn.Module, stages: int) -> list[nn.Module]:
        # Chain the units in forward order and end a stage after each cut; the stages reuse the model's modules.
        cuts = set(self.pipeline_cuts(stages))  # stages - 1 of split_points, spread evenly
        units = [
            ("embed", model.embed),
            *((f"blocks.{i}", b) for i, b in enumerate(model.blocks)),
            ("head", model.head),
        ]
        out: list[nn.Module] = []
        group: list[nn.Module] = []
        for name, module in units:
            group.append(module)
            if name in cuts:
                out.append(nn.Sequential(*group))
                group = []
        out.append(nn.Sequential(*group))
        return out
