"""Known environment changes on a series: the nights a run's software versions differ from the run before.

A run records torch (with CUDA and NCCL on a GPU) and the other packages ``plan/hostinfo.PACKAGES`` names. Between
two consecutive points of a series, every package both runs recorded with different versions makes one event,
drawn on the series (``torch 2.12.0 -> 2.13.0 between nightly-0087 and nightly-0088``). A package only one side
recorded is no event: a scalegate that began recording it must not draw a change on every series.

A change point whose first bad run is an event's first run is attributed to it (check.py), and its next command
is a bisect over that package's releases instead of over commits (alerts.py). ``compared`` says which cases an
event can be judged on: only those run on both sides of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from scalegate.history.store import Point, Run

FIRST = ("torch", "cuda", "nccl")  # listed first, in this order; the rest by name


@dataclass(frozen=True, kw_only=True)
class Event:
    index: int  # position of the first run with the new versions (in its series, or its machine's runs)
    changes: tuple[tuple[str, str, str], ...]  # (package, before, after)
    last_run: str  # the run before the change
    first_run: str  # the first run after it

    @property
    def what(self) -> str:
        return ", ".join(f"{p} {a} -> {b}" for p, a, b in self.changes)

    def describe(self) -> str:
        return f"{self.what} between {self.last_run} and {self.first_run}"

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "changes": [{"package": p, "before": a, "after": b} for p, a, b in self.changes],
            "last_run": self.last_run,
            "first_run": self.first_run,
            "text": self.describe(),
        }


def _rank(package: str) -> tuple[int, str]:
    return (FIRST.index(package) if package in FIRST else len(FIRST), package)


def changed(before: Mapping[str, str], after: Mapping[str, str]) -> tuple[tuple[str, str, str], ...]:
    """Each package both sides recorded at different versions, torch first."""
    both = sorted(before.keys() & after.keys(), key=_rank)
    return tuple((p, before[p], after[p]) for p in both if before[p] != after[p])


def _events(items: Sequence[tuple[str, Mapping[str, str]]]) -> tuple[Event, ...]:
    found = []
    for i in range(1, len(items)):
        (last, before), (first, after) = items[i - 1], items[i]
        if before == after:  # most nights: one comparison, no sorting
            continue
        diff = changed(before, after)
        if diff:
            found.append(Event(index=i, changes=diff, last_run=last, first_run=first))
    return tuple(found)


def of_series(points: Sequence[Point]) -> tuple[Event, ...]:
    """The version changes between consecutive points of one series."""
    return _events([(p.run_id, p.versions) for p in points])


def of_runs(runs: Sequence[Run]) -> tuple[Event, ...]:
    """The version changes between consecutive runs of one machine (cluster and hardware), oldest first."""
    return _events([(r.run_id, r.versions) for r in runs])


@dataclass(frozen=True, kw_only=True)
class Compared:
    both: tuple[str, ...]  # cases run before and after the event: the ones it can be judged on
    only_before: tuple[str, ...]
    only_after: tuple[str, ...]


def compared(event: Event, runs: Sequence[Run], cases_of: Mapping[str, set[str]]) -> Compared:
    """Which cases ran on both sides of an event of ``runs`` (one machine's, oldest first); ``cases_of``: run id to
    its cases. A case that ran on one side only is listed, never compared."""
    before = set().union(*(cases_of.get(r.run_id, set()) for r in runs[: event.index]))
    after = set().union(*(cases_of.get(r.run_id, set()) for r in runs[event.index :]))
    return Compared(
        both=tuple(sorted(before & after)),
        only_before=tuple(sorted(before - after)),
        only_after=tuple(sorted(after - before)),
    )
