"""``NxG`` topologies: N nodes, G worker processes per node, validated when built."""

from __future__ import annotations

import re
from dataclasses import dataclass

from scalegate.contract.errors import SpecError

_PATTERN = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")
MAX_WORLD = 1 << 16


@dataclass(frozen=True, kw_only=True)
class Topology:
    nodes: int
    per_node: int

    def __post_init__(self) -> None:
        for field, value in (("nodes", self.nodes), ("per_node", self.per_node)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError(
                    f"topology {self.nodes}x{self.per_node}: {field}={value!r} must be a whole number >= 1",
                    "write a topology as NxG, e.g. 1x2 (one node, two processes) or 2x2",
                )
        if self.world_size > MAX_WORLD:
            raise SpecError(
                f"topology {self}: world size {self.nodes}*{self.per_node}={self.world_size} exceeds {MAX_WORLD}",
                "check the topology for a typo",
            )

    @classmethod
    def parse(cls, text: str) -> "Topology":
        match = _PATTERN.match(text) if isinstance(text, str) else None
        if not match:
            raise SpecError(
                f"malformed topology {text!r}: expected NxG (N nodes, G processes per node)",
                "write it as two whole numbers joined by 'x', e.g. 1x1, 1x2, 2x2",
            )
        return cls(nodes=int(match.group(1)), per_node=int(match.group(2)))

    @property
    def world_size(self) -> int:
        return self.nodes * self.per_node

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    def __str__(self) -> str:
        return f"{self.nodes}x{self.per_node}"
