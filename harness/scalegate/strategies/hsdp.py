"""HSDP: FSDP2 over a 2-D mesh, parameters replicated across nodes and sharded within a node.

Gradients are reduce-scattered inside a node (fast links) and all-reduced across nodes between
the shard groups, so cross-node traffic is 1/G of DDP's while memory stays sharded per node.
"""

from __future__ import annotations

from torch.distributed.device_mesh import init_device_mesh

from scalegate.strategies.fsdp import FSDP


class HSDP(FSDP):
    name = "hsdp"
    wire_factor = None  # intra- and inter-node volumes differ; measured per node, not predicted here

    def shard_group_size(self) -> int:
        return self.ctx.local_world_size  # state is sharded within a node, replicated across nodes: a copy per node

    def device_mesh(self):
        return init_device_mesh(
            self.ctx.device.type, (self.ctx.nodes, self.ctx.local_world_size), mesh_dim_names=("replicate", "shard")
        )
