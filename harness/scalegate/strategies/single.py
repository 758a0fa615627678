"""One process, no communication: the reference every other strategy is measured against."""

from __future__ import annotations

from scalegate.strategies.base import Strategy


class Single(Strategy):
    name = "single"

    def setup(self, model, make_optimizer):
        self.model = model.to(self.ctx.device)
        self.optimizer = make_optimizer(self.model.parameters())
