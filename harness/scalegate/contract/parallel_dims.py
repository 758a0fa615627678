"""Data-parallel x tensor-parallel degrees of a case, validated when built (torchtitan's ``ParallelDims``).

The tensor-parallel group is a node's ranks (fast links inside a node), data parallelism spans the nodes:
``NxG`` gives ``dp = N``, ``tp = G``. Building one checks that the degrees multiply to the world size and
that the model splits evenly (whole heads and MLP columns per rank), and names every factor when not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scalegate.contract.errors import SpecError
from scalegate.contract.topology import Topology


@dataclass(frozen=True, kw_only=True)
class ParallelDims:
    dp: int
    tp: int
    world_size: int

    def __post_init__(self) -> None:
        for name, value in (("dp", self.dp), ("tp", self.tp), ("world_size", self.world_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(
                    f"parallel dims: {name}={value!r} must be a whole number >= 1",
                    "use a topology NxG: dp = N nodes, tp = G ranks per node",
                )
        if self.dp * self.tp != self.world_size:
            raise SpecError(
                f"parallel dims: dp {self.dp} x tp {self.tp} = {self.dp * self.tp} is not the world size "
                f"{self.world_size}",
                "use a topology NxG: dp = N nodes, tp = G ranks per node",
            )

    @classmethod
    def of(cls, topology: Topology) -> "ParallelDims":
        return cls(dp=topology.nodes, tp=topology.per_node, world_size=topology.world_size)

    def check_divides(self, sizes: dict[str, int], model: str) -> None:
        """Every size (heads, hidden, MLP width) must split into ``tp`` equal whole parts."""
        bad = {name: size for name, size in sizes.items() if size % self.tp}
        if bad:
            listed = ", ".join(f"{name} {size} % tp {self.tp} = {size % self.tp}" for name, size in bad.items())
            raise SpecError(
                f"model {model} does not split over tp={self.tp}: {listed}",
                "use a topology whose ranks per node divide these sizes, or change the preset's dims",
            )

    def mesh(self, device_type: str) -> Any:
        """The 2-D ``DeviceMesh`` ("dp", "tp"): tp varies fastest, so a tp group is one node's ranks."""
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(device_type, (self.dp, self.tp), mesh_dim_names=("dp", "tp"))
