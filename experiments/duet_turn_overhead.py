"""What a duet turn costs: the hand-off between two jobs, measured with real rank processes.

    python -m experiments.duet_turn_overhead --world 2 --turns 2000 --step-ms 0 5

Two jobs (head and base) of ``--world`` rank processes each take ``--turns`` turns through a real coordinator
(launch/duet.py) and the ranks' real client (measure/turns.py) over its unix socket, each step a busy loop of
``--step-ms``. Printed per step length: the wall time of the whole duet over the sum of the steps' own times, as
microseconds per turn: what the hand-off adds to the gate's wall time. It is never inside a timed step: a step is
timed from its turn's grant to the hook that gives it back (worker/script.py, worker/loop.py). Run it with nothing
else on the machine; the load average is printed first.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
from pathlib import Path

from scalegate.launch.duet import Coordinator
from scalegate.measure.turns import Turns

ROOT = Path(__file__).resolve().parents[1]


def rank(address: str, side: str, r: int, world: int, turns: int, step_s: float, out) -> None:
    client = Turns(address, side, "case", r, world, lambda: None)
    client.turn(-1)
    busy = 0.0
    for step in range(turns):
        client.turn(step - 1)
        started = time.perf_counter()
        while time.perf_counter() - started < step_s:
            pass
        busy += time.perf_counter() - started
    client.leave(turns)
    out.put((side, r, busy))


def duet(world: int, turns: int, step_s: float) -> float:
    """Microseconds a turn adds: (wall - every job's busy time) / turns of both jobs."""
    out: mp.Queue = mp.Queue()
    with Coordinator(pair_wait_s=60, turn_s=60) as c:
        procs = [
            mp.Process(target=rank, args=(c.address, side, r, world, turns, step_s, out))
            for side in ("head", "base")
            for r in range(world)
        ]
        started = time.perf_counter()
        for p in procs:
            p.start()
        got = [out.get(timeout=600) for _ in procs]
        wall = time.perf_counter() - started
        for p in procs:
            p.join()
    busy = sum(max(b for s, _, b in got if s == side) for side in ("head", "base"))  # a job's step: its slowest rank
    return (wall - busy) / (2 * turns) * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--turns", type=int, default=2000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--step-ms", type=float, nargs="+", default=[0.0, 5.0])
    a = p.parse_args()
    print("load", open("/proc/loadavg").read().strip())
    for step_ms in a.step_ms:
        costs = [duet(a.world, a.turns, step_ms / 1000) for _ in range(a.reps)]
        print(
            f"world {a.world}, step {step_ms:g} ms: a turn adds {statistics.median(costs):.0f} us "
            f"(median of {a.reps}; {min(costs):.0f}-{max(costs):.0f}), {a.turns} turns per job",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
