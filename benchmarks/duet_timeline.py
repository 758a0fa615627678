"""Where a duet gate's wall goes, round by round (goal: a gate within ten minutes).

    python -m benchmarks.duet_timeline results/gate/gate-20261126-140000     # a gate run's directory
    python -m benchmarks.duet_timeline path/to/merged/duet.json               # or its duet.json

The coordinator keeps each job's timeline (launch/duet.py ``report``): its first rank's hello, its first turn, its
end, and the time its turns held the token. Per round this prints the round's wall and splits it into the turns'
time (both sides' steps, setup turn included), the waits before a job's first turn (the partner still starting),
and the rest: the sides' sessions starting, each launch's start-up before its hello, hand-offs and teardown. Per
job it prints the gap from the same side's previous job's end (or the round's start) to its hello: that launch's
start-up. Nothing is timed here; the figures are the gate's own.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def load(where: Path) -> dict:
    if where.is_dir():
        found = sorted(where.rglob("duet.json"))
        if not found:
            raise SystemExit(f"duet_timeline: no duet.json under {where}\nHINT: pass a gate run's directory")
        where = found[-1]
    data = json.loads(where.read_text())
    if not data.get("rounds_s"):
        raise SystemExit(f"duet_timeline: {where} has no timeline\nHINT: it predates the coordinator's timeline")
    return data


def rounds(data: dict) -> list[dict]:
    """The jobs of each round, in the order they joined, with each one's start-up gap."""
    starts = data["rounds_s"]
    jobs = sorted((j for j in data["jobs"].values() if j.get("joined_s") is not None), key=lambda j: j["joined_s"])
    out = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else max(j["ended_s"] or j["joined_s"] for j in jobs)
        mine = [j for j in jobs if start <= j["joined_s"] < end]
        last_end = {"head": start, "base": start}
        for job in mine:
            job["startup_s"] = job["joined_s"] - last_end[job["side"]]
            last_end[job["side"]] = job["ended_s"] or job["joined_s"]
        out.append({"round": n + 1, "start": start, "end": end, "jobs": mine})
    return out


def summary(r: dict) -> dict:
    """One round's wall, its turns' time (both sides), the waits before the jobs' first turns, and its launches'
    median start-up, in seconds."""
    ups = [j["startup_s"] for j in r["jobs"]]
    return {
        "wall_s": round(r["end"] - r["start"], 1),
        "turns_s": round(sum(j["held_s"] for j in r["jobs"]), 1),
        "waits_s": round(sum((j["first_turn_s"] or j["joined_s"]) - j["joined_s"] for j in r["jobs"]), 1),
        "startup_s": round(statistics.median(ups), 2) if ups else None,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("where", type=Path, help="a gate run's directory or its duet.json")
    a = p.parse_args()
    for r in rounds(load(a.where)):
        s = summary(r)
        wall, held, waits = s["wall_s"], s["turns_s"], s["waits_s"]
        print(
            f"round {r['round']}: {wall:.1f} s; turns {held:.1f} s ({held / wall:.0%}), waits for a partner "
            f"{waits:.1f} s, the rest {wall - held - waits:.1f} s"
        )
        for j in r["jobs"]:
            print(
                f"  {j['side']:>4} {j['job']:<34} start-up {j['startup_s']:5.1f} s  wait "
                f"{(j['first_turn_s'] or j['joined_s']) - j['joined_s']:5.1f} s  turns {j['held_s']:5.1f} s "
                f"({j['turns']})  to its end {(j['ended_s'] or j['joined_s']) - (j['first_turn_s'] or j['joined_s']):5.1f} s"
            )
        if s["startup_s"] is not None:
            total = sum(j["startup_s"] for j in r["jobs"])
            print(f"  start-up: median {s['startup_s']:.1f} s, total {total:.1f} s over {len(r['jobs'])} jobs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
