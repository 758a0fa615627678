"""A user's own LightningModule, handed to scalegate as a workload: nothing in it knows about scalegate
except the small ``LightningWorkload`` at the bottom that names it."""

import lightning.pytorch as pl
import torch
from torch import nn

from scalegate import LightningWorkload, Preset


class LitClassifier(pl.LightningModule):
    """An ordinary LightningModule: forward, training_step, configure_optimizers, train_dataloader."""

    def __init__(self, features: int = 32, width: int = 256, classes: int = 4) -> None:
        super().__init__()
        self.features, self.classes = features, classes
        self.net = nn.Sequential(nn.Linear(features, width), nn.ReLU(), nn.Linear(width, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):  # scalegate uses its own AdamW instead, so one process can follow it
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        # learnable: the class is which quarter of the feature vector has the largest sum
        x = 4 * torch.randn(512, self.features)  # a clear signal: the loss falls within scalegate's few steps
        y = x.view(512, self.classes, -1).sum(-1).argmax(-1)
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64)


class LitWorkload(LightningWorkload):
    name = "lit_classifier"  # test ids: lightning-ddp-lit_classifier-1x2
    module = LitClassifier  # built as LitClassifier(**dims) on every rank
    presets = {
        "tiny": Preset(micro_batch=16, dims={"features": 32, "width": 256, "classes": 4}, dataset_size=512),
        "small": Preset(micro_batch=64, dims={"features": 64, "width": 256, "classes": 4}, dataset_size=512),
    }
