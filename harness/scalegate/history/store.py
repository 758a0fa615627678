"""The results history: finished runs (commit, date, cluster, hardware, software versions, every case's metrics).

Kept in a SQLite file or on a PostgreSQL server (db.py says which, schema.py holds the tables). A run is keyed by
its id (the run directory's name, e.g. ``nightly-123``): adding it again changes nothing, so a retried CI step is
harmless, and two jobs adding at once never both decide a run is new (each store's write transaction, db.py).

A series is one case's metric on one cluster's hardware, oldest run first: software versions are attributes of
each run, so an upgrade of torch or NCCL stays inside its series, where the check can name it (events.py).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

from scalegate.history import schema
from scalegate.history.db import DEFAULT_PATH, POSTGRESQL, Db, locate
from scalegate.plan import hostinfo

__all__ = [
    "DEFAULT_PATH",
    "connect",
    "Run",
    "CaseRow",
    "Point",
    "SeriesKey",
    "add",
    "runs",
    "read_series",
    "Series",
    "all_series",
]


@contextlib.contextmanager
def connect(given: str | Path, *, create: bool = False) -> Iterator[Db]:
    """The store ``given`` names (db.py), its schema made (``create``) or migrated to this scalegate's; closed
    after. Bad input (a URL of another kind, a server out of reach, a missing or foreign store) is a ScalegateError."""
    where = locate(given)
    if where.kind == POSTGRESQL:
        from scalegate.history import postgres_db as backend
    else:
        from scalegate.history import sqlite_db as backend  # type: ignore[no-redef]
    with backend.open(where, create=create) as db:
        schema.ensure(db, create=create)
        yield db


@dataclass(frozen=True, kw_only=True)
class Run:
    run_id: str
    commit: str
    date: str  # ISO 8601, UTC
    profile: str
    source: str = ""  # where the run directory was when it was added
    note: str = ""  # e.g. "commit and date set by benchmarks/history_series.py"
    cluster: str = ""  # "" where the run named none; add() reads it from the profile when left out
    hardware: str = ""  # add() reads it from the profile when left out
    versions: Mapping[str, str] = field(default_factory=dict)  # package -> version; from the profile when empty

    @property
    def machine(self) -> str:
        return machine(self.cluster, self.hardware)


def machine(cluster: str, hardware: str) -> str:
    """What a series is kept apart by, as the pages print it: ``hardware@cluster``, or the hardware alone."""
    return f"{hardware}@{cluster}" if cluster else hardware


@dataclass(frozen=True, kw_only=True)
class CaseRow:
    case_key: str  # strategy-model-topology:preset
    case_id: str
    status: str
    metrics: dict[str, float]


@dataclass(frozen=True, kw_only=True, slots=True)
class Point:
    """One run's value of one metric of one case: a point of a series."""

    run_id: str
    commit: str
    date: str
    value: float
    profile: str = ""
    versions: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class SeriesKey:
    cluster: str
    hardware: str
    case_key: str
    case_id: str
    metric: str

    @property
    def machine(self) -> str:
        return machine(self.cluster, self.hardware)


def _completed(run: Run) -> Run:
    parts = hostinfo.parse_profile(run.profile)
    return Run(
        run_id=run.run_id,
        commit=run.commit,
        date=run.date,
        profile=run.profile,
        source=run.source,
        note=run.note,
        cluster=run.cluster or parts.cluster,
        hardware=run.hardware or parts.hardware,
        versions=dict(run.versions or parts.versions),
    )


def add(db: Db, run: Run, cases: list[CaseRow]) -> bool:
    """Store a run and its cases; False (and nothing written) when the run id is already there."""
    run = _completed(run)
    added = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    with db.transaction():
        inserted = db.run(
            "INSERT INTO runs (run_id, commit_id, date, profile, source, note, added, cluster, hardware) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING",
            (run.run_id, run.commit, run.date, run.profile, run.source, run.note, added, run.cluster, run.hardware),
        )
        if not inserted:
            return False
        db.many("INSERT INTO run_versions VALUES (?, ?, ?)", [(run.run_id, k, v) for k, v in run.versions.items()])
        db.many("INSERT INTO cases VALUES (?, ?, ?, ?)", [(run.run_id, c.case_key, c.case_id, c.status) for c in cases])
        db.many(
            "INSERT INTO measurements VALUES (?, ?, ?, ?)",
            [(run.run_id, c.case_key, m, float(v)) for c in cases for m, v in c.metrics.items()],
        )
    return True


def runs(db: Db) -> list[tuple[Run, int]]:
    """Every run, oldest first (by date, then when it was added, then id), with its number of cases. Sorted here,
    not by the store: a PostgreSQL database's collation may order text otherwise than SQLite's bytes."""
    versions: dict[str, dict[str, str]] = {}
    for run_id, package, version in db.rows("SELECT run_id, package, version FROM run_versions"):
        versions.setdefault(run_id, {})[package] = version
    rows = db.rows(
        "SELECT r.run_id, r.commit_id, r.date, r.profile, r.source, r.note, r.cluster, r.hardware, "
        "(SELECT count(*) FROM cases c WHERE c.run_id = r.run_id), r.added FROM runs r"
    )
    rows.sort(key=lambda r: (r[2], r[9], r[0]))
    return [
        (
            Run(
                run_id=a,
                commit=b,
                date=c,
                profile=d,
                source=e,
                note=f,
                cluster=g,
                hardware=h,
                versions=versions.get(a, {}),
            ),
            n,
        )
        for a, b, c, d, e, f, g, h, n, _ in rows
    ]


@contextlib.contextmanager
def bulk() -> Iterator[None]:
    """No garbage collection while a read builds its objects: each of a few hundred thousand new objects would
    otherwise count towards a collection that walks every object alive, the rows just read among them, and none of
    them is garbage."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class Series:
    """Every series the history holds (or of some metrics), read in one pass over the store: each one's values at
    once (``values``: what a change-point search needs), its points when asked (``points``), so that the search can
    start before the points are built."""

    def __init__(self, known: list[Run], found: dict[tuple, list[tuple[int, float]]]) -> None:
        self._runs = known
        self._found: dict[SeriesKey, list[tuple[int, float]]] = {}
        for (cluster, hardware, key, case_id, metric), pairs in sorted(found.items()):
            pairs.sort(key=lambda p: p[0])
            name = SeriesKey(cluster=cluster, hardware=hardware, case_key=key, case_id=case_id, metric=metric)
            self._found[name] = pairs

    @property
    def keys(self) -> list[SeriesKey]:
        return list(self._found)

    def values(self, key: SeriesKey) -> list[float]:
        """The series' values, oldest run first."""
        return [v for _, v in self._found[key]]

    def points(self, key: SeriesKey) -> list[Point]:
        """The series' points, oldest run first."""
        runs = self._runs
        return [
            Point(run_id=r.run_id, commit=r.commit, date=r.date, value=v, profile=r.profile, versions=r.versions)
            for r, v in ((runs[i], v) for i, v in self._found[key])
        ]


def read_series(db: Db, metrics: tuple[str, ...] | None = None, *, read: list[Run] | None = None) -> Series:
    """Every series the history holds (or of ``metrics`` only), in one read of the store; ``read``: the store's runs,
    where the caller has read them already."""
    known = read if read is not None else [r for r, _ in runs(db)]
    order = {run.run_id: (i, run.cluster, run.hardware) for i, run in enumerate(known)}
    found: dict[tuple, list[tuple[int, float]]] = {}
    with bulk():
        ids = {
            (run_id, key): case_id for run_id, key, case_id in db.rows("SELECT run_id, case_key, case_id FROM cases")
        }
        rows = db.rows("SELECT run_id, case_key, metric, value FROM measurements")  # the cases' ids joined here: faster
        for run_id, key, metric, value in rows:
            seen, case_id = order.get(run_id), ids.get((run_id, key))
            if seen is None or case_id is None or (metrics is not None and metric not in metrics):
                continue  # a run added after the runs were read
            i, cluster, hardware = seen
            found.setdefault((cluster, hardware, key, case_id, metric), []).append((i, value))
        del rows
        return Series(known, found)


def all_series(
    db: Db, metrics: tuple[str, ...] | None = None, *, read: list[Run] | None = None
) -> dict[SeriesKey, list[Point]]:
    """Every series the history holds (or of ``metrics`` only), each oldest run first, its points built."""
    series = read_series(db, metrics, read=read)
    with bulk():
        return {key: series.points(key) for key in series.keys}


def case_runs(db: Db, case: str) -> list[tuple[Run, CaseRow]]:
    """Every run of a case (by id ``ddp-cnn-1x2`` or key ``ddp-cnn-1x2:tiny``), oldest first."""
    by_id = {run.run_id: run for run, _ in runs(db)}
    cases = db.rows(
        "SELECT run_id, case_key, case_id, status FROM cases WHERE case_id = ? OR case_key = ?", (case, case)
    )
    values: dict[tuple[str, str], dict[str, float]] = {}
    for run_id, key, metric, value in db.rows(
        "SELECT m.run_id, m.case_key, m.metric, m.value FROM measurements m JOIN cases c ON c.run_id = m.run_id "
        "AND c.case_key = m.case_key WHERE c.case_id = ? OR c.case_key = ?",
        (case, case),
    ):
        values.setdefault((run_id, key), {})[metric] = value
    order = {run_id: i for i, run_id in enumerate(by_id)}
    found = [
        (by_id[run_id], CaseRow(case_key=key, case_id=case_id, status=status, metrics=values.get((run_id, key), {})))
        for run_id, key, case_id, status in cases
        if run_id in by_id
    ]
    return sorted(found, key=lambda rc: (order[rc[0].run_id], rc[1].case_key))


def known_cases(db: Db) -> list[str]:
    return sorted(r[0] for r in db.rows("SELECT DISTINCT case_key FROM cases"))
