"""A gate on several nodes: one gate process per node of a SLURM allocation, node 0 leading, the others following.

    srun --ntasks-per-node=1 python -m scalegate gate --base origin/main -k "ddp-cnn-2x1 or single-cnn-1x1"

Every node checks out the base commit beside its own working tree (gate/life.py: ``base-tree-node<k>`` under the
gate's run directory, whose name every node derives from the job and step), so the nodes need no filesystem in common
for their trees; the results directory must be shared, as for any multi-node case (launch/slurm.py: node 0 reads
every rank's file). Node 0 runs the coordinator on tcp (gate/pairing.py); each other node connects to it and says
``follow``. Each round node 0 names the round (its pytest arguments and the side that turns first) to every
follower, runs its own two sessions while the followers run theirs (each session is its node's torchrun agent, and
every rank of a job pairs through the one coordinator), and waits until every follower ran it. Node 0 alone
merges, judges and writes the table; at the end it tells the followers the gate's exit code, which they exit with.
A follower whose connection closes stops the gate, naming its node and the round; a follower whose node 0 is gone
ends its sessions and exits with bad input.
"""

from __future__ import annotations

import contextlib
import queue
import select
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from scalegate import policy
from scalegate.contract import duet
from scalegate.contract.errors import ScalegateError
from scalegate.gate.paired import Paired, Place, at_once
from scalegate.gate.plan import GatePlan
from scalegate.gate.sessions import Sessions
from scalegate.gate.sides import RoundSide
from scalegate.launch.duet_nodes import NodeRegistry, NodeSaid


class Leader:
    """Node 0's side of the followers (gate/rounds.py ``Followers``), over its coordinator's node registry."""

    def __init__(self, registry: NodeRegistry, address: str, count: int) -> None:
        self.registry, self.address, self.count = registry, address, count
        self.round = 0
        self.ran: set[int] = set()  # the followers that ran this round

    def wait_joined(self, timeout_s: float) -> None:
        """Until every other node's gate follows; bad input naming the missing nodes past ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while len(self.registry.joined) < self.count and time.monotonic() < deadline:
            time.sleep(0.2)
        missing = sorted(set(range(1, self.count + 1)) - set(self.registry.joined))
        if missing:
            raise ScalegateError(
                f"node(s) {', '.join(map(str, missing))} of the allocation did not join the gate in {timeout_s:.0f} s "
                f"(node 0's coordinator at {self.address})",
                "run one gate per node: srun --ntasks-per-node=1 python -m scalegate gate --base REF ...; check that "
                "the nodes reach node 0 over tcp",
            )
        self.check()

    def start_round(self, n: int, args: list[str], first: str) -> None:
        self.round, self.ran = n, set()
        for node in self.registry.joined:
            try:
                self.registry.send(node, {"op": "round", "n": n, "args": args, "first": first})
            except OSError:
                raise _gone(node, n) from None

    def check(self) -> None:
        """While node 0's sessions run: a follower gone meanwhile stops the gate now, naming it, rather than after
        node 0's ranks waited out their collectives' timeouts."""
        with contextlib.suppress(queue.Empty):
            while True:
                self._take(self.registry.next())

    def wait_round(self, n: int) -> None:
        """Until every follower ran round ``n``; a follower gone meanwhile stops the gate, naming it. Node 0's
        sessions have ended, so every job of the round has: a follower's session still running after
        ``ROUND_GRACE_S`` (a rank hung outside its collectives) is told to end."""
        told = time.monotonic() + policy.ROUND_GRACE_S
        while len(self.ran) < self.count:
            try:
                self._take(self.registry.next(timeout=1.0))
            except queue.Empty:
                pass
            if told is not None and time.monotonic() > told:
                print(f"gate: round {n}: node 0's sessions ended; telling the others to end theirs", flush=True)
                for node in self.registry.joined:
                    if node not in self.ran:
                        with contextlib.suppress(OSError):
                            self.registry.send(node, {"op": "end-round", "n": n})
                told = None

    def _take(self, said: NodeSaid) -> None:
        if said.message.get("op") == "ran" and said.message.get("n") == self.round:
            self.ran.add(said.node)
        elif said.message.get("op") == "gone":
            raise _gone(said.node, self.round)

    def end(self, code: int) -> None:
        for node in self.registry.joined:
            with contextlib.suppress(OSError):
                self.registry.send(node, {"op": "end", "code": code})


def _gone(node: int, n: int) -> ScalegateError:
    return ScalegateError(
        f"node {node}'s gate process ended{f' in round {n}' if n else ''}: the gate stopped; its sessions on node 0 "
        "were ended",
        f"read node {node}'s output (srun prefixes each line with its task: -l); rerun the gate",
    )


@contextlib.contextmanager
def lead(plan: GatePlan, paired: Paired | None) -> Iterator[Leader | None]:
    """On node 0 of a multi-node gate, its followers once every node joined; None on one node or on a follower."""
    if plan.nodes is None:
        yield None
        return
    if paired is None:
        raise ScalegateError(
            "a gate on several nodes pairs its sides through node 0's coordinator, and this one is not paired",
            "gate against a base whose scalegate speaks the duet (or --pairing alternate), or run on one node",
        )
    if plan.node != 0:
        yield None
        return
    assert paired.coordinator is not None  # node 0 runs the coordinator
    leader = Leader(paired.coordinator.nodes, paired.coordinator.tcp_address, plan.nodes.nnodes - 1)
    leader.wait_joined(policy.NODE_WAIT_S)
    code = 2
    try:
        yield leader
        code = 0
    finally:
        leader.end(code)  # node 0 reports the verdict; a follower exits 0 unless told of bad input


def follow(
    plan: GatePlan,
    sides: Sequence[RoundSide],
    paired: Paired | None,
    sessions: Sessions,
    on_round: Callable[[int], None] = lambda n: None,
) -> int:
    """A node other than 0: run every round node 0 names, both sides' sessions on this node, until it ends the gate;
    the exit code node 0 sends. ``on_round(n)`` as each round starts (the gate names it if a signal stops it)."""
    assert paired is not None and plan.nodes is not None
    sock = _connect(paired.address, policy.NODE_WAIT_S)
    lines = duet.Lines(sock)
    duet.send(sock, {"op": "follow", "v": duet.VERSION, "node": plan.node})
    try:
        with sessions.ending():
            return _follow(plan, sides, paired, sessions, sock, lines, on_round)
    finally:
        sock.close()


def _follow(
    plan: GatePlan,
    sides: Sequence[RoundSide],
    paired: Paired,
    sessions: Sessions,
    sock: socket.socket,
    lines: duet.Lines,
    on_round: Callable[[int], None],
) -> int:
    while True:
        message = lines.read()
        if message is None:
            raise ScalegateError(
                f"node {plan.node}: node 0's gate closed its connection before the end of the gate",
                "read node 0's output: it names what stopped the gate",
            )
        if message["op"] == "end":
            return int(message.get("code", 0))
        if message["op"] == "round":
            n = int(message["n"])
            on_round(n)
            ordered = list(sides) if sides[-1].name == message["first"] else list(sides)[::-1]
            place = Place(gate_dir=plan.gate_dir, n=n, log=f"session-node{plan.node}.log")
            watch = _Listening(node=plan.node, n=n, sock=sock, lines=lines, sessions=sessions)
            codes = at_once(ordered, list(message["args"]), place, paired, sessions, watch)
            duet.send(sock, {"op": "ran", "n": n, "codes": codes})


@dataclass(frozen=True, kw_only=True)
class _Listening:
    """A follower's watch over its paired round (gate/paired.py ``Watch``): node 0's word, until both its sessions
    ended or node 0 says the round is over (``end-round``: its own sessions ended, so every job has)."""

    node: int
    n: int
    sock: socket.socket
    lines: duet.Lines
    sessions: Sessions

    def ended(self, side: str, code: int, log: Path) -> None:
        pass

    def wait(self) -> None:
        if not select.select([self.sock], [], [], 0.5)[0]:
            return
        message = self.lines.read()
        if message is None:
            raise ScalegateError(
                f"node {self.node}: node 0's gate closed its connection in round {self.n}",
                "read node 0's output: it names what stopped the gate",
            )
        if message.get("op") == "end-round":
            self.sessions.stop()


def _connect(address: str, timeout_s: float) -> socket.socket:
    """Node 0's coordinator, waited for up to ``timeout_s``: the nodes' gates start at once and node 0 listens only
    once its base tree is checked out."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            sock = duet.connect(address, timeout=None)  # type: ignore[arg-type]
            return sock
        except OSError as exc:
            if time.monotonic() > deadline:
                raise ScalegateError(
                    f"node 0's gate at {address} could not be reached in {timeout_s:.0f} s ({exc})",
                    "check that node 0's gate started and that the nodes reach each other over tcp",
                ) from None
            time.sleep(1.0)
