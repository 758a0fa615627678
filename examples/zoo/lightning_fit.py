"""A LightningModule trained with ``Trainer.fit``, as Lightning's docs write it.

    python lightning_fit.py                                                        # one process
    torchrun --nproc-per-node 2 lightning_fit.py --devices 2 --strategy ddp         # DDP over torchrun's ranks

Under torchrun Lightning reads the ranks from the environment (its TorchElasticEnvironment), so ``--devices`` and
``--num-nodes`` must match the launch. ``self.log(..., prog_bar=True)`` puts the loss on the progress bar; with the
bar off, as in a batch job, ``self.print`` (rank 0 only) writes a line per step: ``step 3 train_loss 2.2914``.
"""

import argparse

import lightning as L
import torch
from torch import nn


class Classifier(L.LightningModule):
    def __init__(self, dim: int = 256, lr: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(dim, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))

    def training_step(self, batch, batch_idx):
        inputs, labels = batch
        loss = nn.functional.cross_entropy(self.net(inputs), labels)
        self.log("train_loss", loss, prog_bar=True)
        self.print(f"step {self.global_step} train_loss {loss.item():.4f}")
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


def dataset(size: int, dim: int, classes: int = 10) -> torch.utils.data.TensorDataset:
    """A learnable task, the same on every rank: the class is which of ``classes`` fixed centres a sample is near."""
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(classes, dim, generator=g)
    labels = torch.randint(0, classes, (size,), generator=g)
    return torch.utils.data.TensorDataset(centres[labels] + 0.7 * torch.randn(size, dim, generator=g), labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank per step")
    args = parser.parse_args()

    L.seed_everything(0)
    loader = torch.utils.data.DataLoader(dataset(65536, 256), batch_size=args.batch_size, shuffle=True)
    trainer = L.Trainer(
        accelerator="auto",
        devices=args.devices,
        num_nodes=args.num_nodes,
        strategy=args.strategy,
        max_steps=args.max_steps,
        enable_progress_bar=False,
        enable_checkpointing=False,
        logger=False,
        enable_model_summary=False,
    )
    trainer.fit(Classifier(), loader)


if __name__ == "__main__":
    main()
