"""The duet's protocol (docs/duet.md): what the gate's coordinator and every rank's client share.

Both commits' jobs for a case are resident at once and take turns, one optimizer step each. The coordinator
(``launch/duet.py``, a thread of the gate) listens at ``SCALEGATE_DUET``; each rank of each job opens one connection
(``measure/turns.py``) and speaks JSON lines:

    rank -> coordinator   {"op": "hello", "v": 2, "side": "head", "job": "ddp-cnn-1x2#1", "rank": 0, "world": 2}
    coordinator -> rank   {"op": "go", "turn": 7}      run until the next turn() call
    rank -> coordinator   {"op": "done", "step": 6}    the turn is given back
    rank -> coordinator   {"op": "bye", "step": 24}    the job's last turn ended
    coordinator -> rank   {"op": "solo", "why": ...}   no partner: run alone, ask for no more turns
    coordinator -> rank   {"op": "stop", "why": ...}   stop with this message (the other side failed, a hang)

An address is ``unix:/path`` (one host; a path socket is reached from inside the emulated nodes' network
namespaces too) or ``tcp:HOST:PORT`` (for a later multi-node A/B under srun).
"""

from __future__ import annotations

import json
import math
import os
import socket
from typing import Any

# 2: a training script's 1x1 reference launches SCRIPT_REFERENCE_LAUNCHES times a session in a duet, so both sides
# must launch the same jobs (a version-1 base would leave the head's later reference jobs without a partner)
# 3: and its case SCRIPT_CASE_LAUNCHES times (a version-2 base would launch it once)
# 4: four times, and the reference's launches measure twice the case's steps
# 5: the reference's launches measure the case's steps again (a version-4 base would measure twice them)
# 6: half the case's steps, at least SCRIPT_REFERENCE_MIN_STEPS (a version-5 base would measure all of them)
VERSION = 6
VERSION_LINE = f"VERSION = {VERSION}\n"  # how a checkout's copy of this file says its version (cli/gate.py reads it)
ADDRESS_ENV = "SCALEGATE_DUET"  # the coordinator's address; unset: no duet, every turn() is a no-op
SIDE_ENV = "SCALEGATE_DUET_SIDE"  # "base" or "head"
SIDES = ("base", "head")
CLIENT_FILE = "harness/scalegate/measure/turns.py"  # a checkout without it has no duet client (an older base)
PROTOCOL_FILE = "harness/scalegate/contract/duet.py"  # ... and one whose copy of this file has another VERSION


PAIR_WAIT_S = float(os.environ.get("SCALEGATE_DUET_PAIR_WAIT_S", 120))  # a job waits this long for its partner


# A training script's 1x1 reference launches this many times a session in a duet, unless
# --scaling-reference-launches says otherwise: each 1x1 launch keeps a level of its own (A/A, the example script,
# 600 pairs, 8 rounds each: head/base at 1x1 spread 3.75% between rounds with one launch, 1.41% with four, the
# efficiency 4.38% and 2.08%; benchmarks/duet_bias.py, docs/duet.md). A workload's 1x1 case spreads far less.
SCRIPT_REFERENCE_LAUNCHES = 4


# ... and its case at W this many times, unless --scaling-launches says otherwise; the judge pools a round's launches
# into one estimate (cli/gate_rounds.py ``pooled``). A W launch keeps a level of its own, and at W that level, not the
# pairs, is most of a round's spread, so more launches of fewer steps spread less. A/A, the example script: four W
# launches of 300 pairs spread the efficiency 1.99% between rounds (16 rounds; two W launches of 600: 3.58%).
SCRIPT_CASE_LAUNCHES = 4


# ... and each of its 1x1 reference's launches measures this share of the case's steps, at least
# SCRIPT_REFERENCE_MIN_STEPS (never more than the case's), unless --scaling-reference-steps names others. At 1x1 a
# launch's level (3-4% apart), not its pairs (0.7-1.3%), is the spread, and the first pairs of a launch are its
# steadiest: the whole gates' 30 A/A rounds of the eighth set, their 1x1 launches cut from 300 pairs to their first
# 150, spread the efficiency 2.47% (all 300: 2.51%), and 10,000 replayed gates caught a 5% drop 95.8% with 0.4% false
# alarms (all 300: 96.6%, 0.7%); cut at W instead (200 of 300), 89.2%. It saves about 11 s of a ~100 s round
# (benchmarks/duet_estimators.py --keep-units 0,75; docs/duet.md).
SCRIPT_REFERENCE_SHARE = 0.5
SCRIPT_REFERENCE_MIN_STEPS = 100


# ... and its duet gate decides within this many rounds, unless --scaling-max-launches is named: a round of the
# example script takes about 90 s (half of it its launches' start-up and waits; benchmarks/duet_timeline.py), so
# eight rounds would take 12 minutes. Over the 59 A/A rounds of 18 whole gates (eighth and ninth sets), 10,000
# replayed gates, 5% tolerance, the judge's floor 2.70%: seven rounds catch a 5% drop 96.5% with 0.7% false alarms
# (six: 92.5%, eight: 98.4%); the ninth set's gates took 183-490 s (benchmarks/duet_replay.py, docs/duet.md).
SCRIPT_ROUNDS = 7


def script_rounds(budget: int, named: bool) -> int:
    """A training script's budget of duet rounds in a gate whose budget is ``budget``: ``SCRIPT_ROUNDS`` (at most
    ``budget``) unless the user ``named`` --scaling-max-launches."""
    return budget if named else min(budget, SCRIPT_ROUNDS)


def case_launches(script: bool, launches: int, named: bool) -> int:
    """The case's launches a session: ``launches`` where ``--scaling-launches`` was ``named``, else
    ``SCRIPT_CASE_LAUNCHES`` for a training script's inside a duet, else ``launches``."""
    return SCRIPT_CASE_LAUNCHES if script and not named and os.environ.get(ADDRESS_ENV) else launches


def reference_launches(script: bool, launches: int) -> int:
    """The 1x1 reference's launches a session where the user named none: ``SCRIPT_REFERENCE_LAUNCHES`` for a
    training script's inside a duet, else ``launches`` (``--scaling-launches``)."""
    return SCRIPT_REFERENCE_LAUNCHES if script and os.environ.get(ADDRESS_ENV) else launches


def reference_steps(script: bool, steps: int) -> int:
    """The measured steps of a case's 1x1 reference launch of ``steps``, where the user named none: a training
    script's in a duet ``SCRIPT_REFERENCE_SHARE`` of them (at least ``SCRIPT_REFERENCE_MIN_STEPS``), else ``steps``."""
    if not (script and os.environ.get(ADDRESS_ENV)):
        return steps
    return min(steps, max(SCRIPT_REFERENCE_MIN_STEPS, math.ceil(steps * SCRIPT_REFERENCE_SHARE)))


def launch_timeout(timeout_s: float) -> float:
    """A launch's time limit in a duet: its partner's steps run between its own, and it may wait for the partner to
    join first; outside a duet, ``timeout_s`` itself."""
    return 2 * timeout_s + PAIR_WAIT_S if os.environ.get(ADDRESS_ENV) else timeout_s


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
    raise ValueError(f"{ADDRESS_ENV}={address!r} is not unix:/path or tcp:HOST:PORT")


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


def first_side(pair: int, sides: tuple[str, str] = ("head", "base")) -> str:
    """Which side's step comes first in turn pair ``pair``: the pairs alternate, so the turns run ABBA ABBA (head,
    base, base, head, head, base, ...) and neither side always follows the other's step."""
    return sides[pair % 2]
