"""A multi-node case's launches under srun: node 0 decides how many, every other node joins each.

Node 0 launches a case as often as its session asks: a training script's pooled launches in a paired session, the
sequential test's further launches, a confirmation. Every launch needs each node's agent, so the other nodes follow
node 0's count rather than their own. Before each launch node 0 writes the count it has started into the case's
directory on the results filesystem the nodes share (``launches.json``), and once it has judged the case it marks
the count done; a node 1.. launches while node 0's count is ahead of its own and stops when node 0 is done.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from scalegate.contract import atomic
from scalegate.contract.errors import LaunchError

PLAN = "launches.json"
POLL_S = 0.2


def announce(case_dir: Path, started: int, done: bool = False) -> None:
    """Node 0: ``started`` launches of the case begun so far; ``done``: no more will be."""
    atomic.write_json(case_dir / PLAN, {"started": started, "done": done})


def _read(case_dir: Path) -> dict | None:
    try:
        plan = json.loads((case_dir / PLAN).read_text())
    except (OSError, ValueError):
        return None  # not written yet
    return plan if isinstance(plan, dict) else None


def follow(case_dir: Path, launch: Callable[[], object], wait_s: float) -> int:
    """Node 1..: one ``launch()`` for each launch node 0 starts, until node 0 says it is done; the launches made.
    A LaunchError where node 0 says nothing new for ``wait_s`` seconds (its node or session is gone)."""
    made, heard = 0, time.monotonic()
    while True:
        plan = _read(case_dir)
        if plan is not None and int(plan.get("started", 0)) > made:
            launch()
            made, heard = made + 1, time.monotonic()
            continue
        if plan is not None and plan.get("done"):
            return made
        if time.monotonic() - heard > wait_s:
            raise LaunchError(
                f"node 0 started no launch of {case_dir.name} for {wait_s:.0f} s after this node's {made} "
                f"(it writes {case_dir / PLAN} on the results filesystem the nodes share)",
                "check that --scaling-results-dir is on a filesystem every node shares, and read node 0's output",
            )
        time.sleep(POLL_S)
