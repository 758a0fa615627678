"""A paired round: both sides' sessions at once, their jobs taking turns through the coordinator (launch/duet.py).

``at_once`` is the one loop that runs them, on a gate's one node, on node 0 and on every other node of a multi-node
gate (gate/nodes.py): it starts both sessions, each writing its output to a log in its round's directory (two
sessions would interleave on the terminal), and waits until both have ended. What differs by node is the ``Watch``:
node 0 tells the coordinator as each session ends and hears its followers meanwhile (gate/rounds.py); another node
listens to node 0 (gate/nodes.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Protocol, Sequence

from scalegate.gate.sessions import Sessions
from scalegate.gate.sides import RoundSide
from scalegate.launch.duet_nodes import NodeRegistry

Merged = dict[str, list[dict[str, Any]]]  # each side's merged cases


class Coordinating(Protocol):
    """What the gate asks of node 0's coordinator (launch/duet.py): its addresses, the other nodes that follow it,
    and word of each round's start and of each session's end."""

    @property
    def address(self) -> str: ...

    @property
    def tcp_address(self) -> str: ...

    @property
    def nodes(self) -> NodeRegistry: ...

    def round_started(self, refused: dict[str, str] | None = None, first: str = "head") -> None: ...

    def side_ended(self, side: str) -> None: ...


def none_refused(merged: Merged) -> dict[str, str]:
    """No case alternates whole: every case's two jobs fit (or the pairing has no refusals)."""
    return {}


@dataclass(frozen=True, kw_only=True)
class Paired:
    """How a gate's two sides share the host: the sessions' pairing options, this node's coordinator (None on a node
    other than 0: it pairs through node 0's, at ``address``), and the cases whose two jobs alternate whole this round
    (``refusals``: {case id: why} from the rounds so far)."""

    pairing: str  # the sessions' --scaling-duet-pairing: "duet" or "alternate"
    address: str  # the sessions' --scaling-duet: where their ranks reach the coordinator
    coordinator: Coordinating | None = None
    refusals: Callable[[Merged], dict[str, str]] = none_refused

    def args(self, side: str) -> list[str]:
        return [
            f"--scaling-duet={self.address}",
            f"--scaling-duet-side={side}",
            f"--scaling-duet-pairing={self.pairing}",
        ]


@dataclass(frozen=True, kw_only=True)
class Place:
    """Where round ``n``'s sessions write: ``<gate dir>/round-NN/<side>``, a paired session's output in ``log``."""

    gate_dir: Path
    n: int
    log: str = "session.log"

    def of(self, side: str, sides: int = 2) -> Path:
        return self.gate_dir / f"round-{self.n:02d}" / (side if sides > 1 else "")


class Watch(Protocol):
    """What a node does while its two sessions of a paired round run."""

    def ended(self, side: str, code: int, log: Path) -> None:
        """``side``'s session ended with ``code``; its output is in ``log``."""

    def wait(self) -> None:
        """Between two looks at the sessions: a short wait, hearing the other nodes meanwhile."""


def at_once(
    sides: Sequence[RoundSide], args: Sequence[str], place: Place, paired: Paired, sessions: Sessions, watch: Watch
) -> dict[str, int]:
    """Both sides' sessions of a round at once (``args``: the round's pytest arguments), until both have ended; each
    side's exit code."""
    running: dict[str, tuple[Any, IO[str]]] = {}
    for side in sides:
        where = place.of(side.name)
        where.mkdir(parents=True, exist_ok=True)
        log = open(where / place.log, "w")
        argv = side.command(args, where, paired.args(side.name))
        running[side.name] = (sessions.start(argv, tree=side.tree, env=side.environment(), log=log), log)
    codes: dict[str, int] = {}
    while True:
        for name, (proc, log) in running.items():
            if name not in codes and proc.poll() is not None:
                log.close()
                codes[name] = sessions.finish(proc)
                watch.ended(name, codes[name], Path(log.name))
        if len(codes) == len(running):
            return codes
        watch.wait()
