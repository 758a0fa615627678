"""A multi-node gate's other nodes, as node 0's coordinator knows them (gate/nodes.py reads it).

Each other node's gate connects to node 0's coordinator and says ``follow``; the registry keeps its connection, and
puts everything a node says (``follow``, ``ran``, and ``gone`` when its connection closes) on one queue, in order, for
node 0's gate to read (``next``) while it runs its rounds.
"""

from __future__ import annotations

import queue
import socket
from dataclasses import dataclass
from typing import Any

from scalegate.contract import duet


@dataclass(frozen=True, kw_only=True)
class NodeSaid:
    """What a node's gate said: ``{"op": "follow" | "ran", ...}``, or ``{"op": "gone"}`` when its connection closed."""

    node: int
    message: dict[str, Any]


class NodeRegistry:
    def __init__(self) -> None:
        self.connections: dict[int, socket.socket] = {}  # node -> its gate's connection
        self.said: queue.Queue[NodeSaid] = queue.Queue()

    # --- node 0's gate ------------------------------------------------------------------------------------------
    @property
    def joined(self) -> list[int]:
        """The nodes that follow, in order."""
        return sorted(self.connections)

    def send(self, node: int, message: dict[str, Any]) -> None:
        """To ``node``'s gate; OSError where its connection is gone."""
        duet.send(self.connections[node], message)

    def next(self, timeout: float = 0.0) -> NodeSaid:
        """What a node said next, waiting up to ``timeout`` seconds (0: not at all); queue.Empty where none did."""
        return self.said.get(timeout=timeout) if timeout > 0 else self.said.get_nowait()

    # --- the coordinator's thread -------------------------------------------------------------------------------
    def follow(self, sock: socket.socket, message: dict[str, Any]) -> None:
        node = int(message["node"])
        self.connections[node] = sock
        self.said.put(NodeSaid(node=node, message=message))

    def owns(self, sock: socket.socket) -> bool:
        return sock in self.connections.values()

    def heard(self, sock: socket.socket, message: dict[str, Any] | None) -> None:
        """A message from a node's connection, or None where it closed."""
        node = next(n for n, s in self.connections.items() if s is sock)
        self.said.put(NodeSaid(node=node, message=message or {"op": "gone"}))

    def close(self) -> None:
        for sock in self.connections.values():
            sock.close()
