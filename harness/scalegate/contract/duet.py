"""The duet's protocol (docs/duet.md): what the gate's coordinator and every rank's client share.

Both commits' jobs for a case take turns: one optimizer step each (the duet; ``gate --turn-steps K``: K steps each),
or one whole job each (the alternate pairing, for jobs that cannot be resident twice); in the swap pairing a job's
state leaves device memory between its turns (``measure/swap.py``). The coordinator
(``launch/duet.py``, a thread of the gate on node 0) listens at the address each session is given (``--scaling-duet``)
and its specs carry (``spec.duet.address``); each rank of each job opens one connection (``measure/turns.py``)
and speaks JSON lines:

    rank -> coordinator   {"op": "hello", "v": 11, "side": "head", "job": "ddp-cnn-1x2", "rank": 0, "world": 2}
    coordinator -> rank   {"op": "go", "turn": 7, "limit_s": 600, "steps": 1}
                                                       run until the ``steps``-th turn() call from now (a job's
                                                       first turn, its setup, is always 1), within the turn limit;
                                                       with ``"swap": true`` the rank swaps its state in now and
                                                       out when it gives the turn back
    rank -> coordinator   {"op": "done", "step": 6}    the turn is given back
    rank -> coordinator   {"op": "where", "frame": "forward (model.py:52)", "torch": false}
                                                       a turn held past half its limit: where the rank's thread is
    rank -> coordinator   {"op": "bye", "step": 24}    the job's last turn ended
    coordinator -> rank   {"op": "solo", "why": ...}   no partner: run alone, ask for no more turns
    coordinator -> rank   {"op": "alone", "why": ...}  alternate pairing: the whole job runs now, its partner before
                                                       or after it, never beside it
    coordinator -> rank   {"op": "stop", "why": ...}   stop with this message (the other side failed, a hang); a
                                                       rank that holds its turn reads it in its watcher thread and
                                                       its process exits at once (measure/turns.py)

A multi-node gate's other nodes follow node 0 over the same address (gate/nodes.py):

    node -> coordinator   {"op": "follow", "v": 11, "node": 1}
    coordinator -> node   {"op": "round", "n": 2, "args": [...], "first": "base"}   run this round's two sessions
    node -> coordinator   {"op": "ran", "n": 2, "codes": {"base": 0, "head": 0}}
    coordinator -> node   {"op": "end", "code": 0}                                  the gate is over

An address is ``unix:/path`` (one host; a path socket is reached from inside the emulated nodes' network
namespaces too) or ``tcp:HOST:PORT`` (the nodes of a SLURM allocation).
"""

from __future__ import annotations

import json
import socket
from typing import Any

# The protocol's version, raised with any change to the messages or to the options that tell a session it is paired
# (--scaling-duet, --scaling-duet-side, --scaling-duet-pairing): a gate pairs with a base commit's ranks only where
# both speak the same one (gate/sides.py).
VERSION = 11
VERSION_LINE = f"VERSION = {VERSION}\n"  # how a checkout's copy of this file says its version (gate/sides.py reads it)
SIDES = ("base", "head")
CLIENT_FILE = "harness/scalegate/measure/turns.py"  # a checkout without it has no duet client (an older base)
PROTOCOL_FILE = "harness/scalegate/contract/duet.py"  # ... and one whose copy of this file has another VERSION


def connect(address: str, timeout: float) -> socket.socket:
    """A connection to ``address`` (``unix:/path`` or ``tcp:HOST:PORT``)."""
    kind, _, where = address.partition(":")
    if kind == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(where)
        return sock
    if kind == "tcp":
        host, _, port = where.rpartition(":")
        sock = socket.create_connection((host, int(port)), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise ValueError(f"duet address {address!r} is not unix:/path or tcp:HOST:PORT")


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall((json.dumps(message) + "\n").encode())


class Lines:
    """JSON messages off a stream socket, one per line."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, b""

    def read(self) -> dict[str, Any] | None:
        """The next message; None when the other end closed."""
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


def turn_length(steps: int) -> str:
    """How a duet's turns are said in the gate's lines: "step by step", or "K steps at a time"."""
    return "step by step" if steps <= 1 else f"{steps} steps at a time"


def first_side(pair: int, sides: tuple[str, str] = ("head", "base")) -> str:
    """Which side's step comes first in turn pair ``pair``: the pairs alternate, so the turns run ABBA ABBA (head,
    base, base, head, head, base, ...) and neither side always follows the other's step."""
    return sides[pair % 2]
