"""The results history: finished runs (commit, date, profile, every case's metrics) in one SQLite file.

Why SQLite: one file a team can keep on shared storage, no server, transactions, and Python ships it.
Several nightly jobs may add runs at once: every write is one ``BEGIN IMMEDIATE`` transaction (the
writer takes the lock before reading, so two writers never both decide a run is new), and a busy
writer waits up to ``BUSY_TIMEOUT_S`` for the lock. The journal stays the default rollback journal,
not WAL: WAL needs shared memory between the processes, which a network filesystem (where a team keeps
this file) does not give; SQLite's docs say WAL "does not work over a network filesystem".

A run is keyed by its id (the run directory's name, e.g. ``nightly-123``): adding it again changes
nothing, so a retried CI step is harmless.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from scalegate.contract.errors import ScalegateError

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 120.0
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, commit_id TEXT NOT NULL, date TEXT NOT NULL, profile TEXT NOT NULL,
    source TEXT NOT NULL, note TEXT NOT NULL DEFAULT '', added TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cases (
    run_id TEXT NOT NULL REFERENCES runs(run_id), case_key TEXT NOT NULL, case_id TEXT NOT NULL,
    status TEXT NOT NULL, PRIMARY KEY (run_id, case_key));
CREATE TABLE IF NOT EXISTS measurements (
    run_id TEXT NOT NULL, case_key TEXT NOT NULL, metric TEXT NOT NULL, value REAL NOT NULL,
    PRIMARY KEY (run_id, case_key, metric));
"""


@dataclass(frozen=True, kw_only=True)
class Run:
    run_id: str
    commit: str
    date: str  # ISO 8601, UTC
    profile: str
    source: str = ""  # where the run directory was when it was added
    note: str = ""  # e.g. "commit and date set by benchmarks/history_series.py"


@dataclass(frozen=True, kw_only=True)
class CaseRow:
    case_key: str  # strategy-model-topology:preset
    case_id: str
    status: str
    metrics: dict[str, float]


@dataclass(frozen=True, kw_only=True)
class Point:
    """One run's value of one metric of one case: a point of a series."""

    run_id: str
    commit: str
    date: str
    value: float


DEFAULT_PATH = Path("results") / "history.sqlite"  # under the directory the command runs in


def _bad(path: Path, why: str) -> ScalegateError:
    return ScalegateError(
        f"history database {path} {why}",
        "pass the right file with --db (or SCALEGATE_HISTORY_DB), or move the broken file away "
        "and add the runs again with `python -m scalegate history add results/<run>`",
    )


@contextlib.contextmanager
def connect(path: Path, *, create: bool = False) -> Iterator[sqlite3.Connection]:
    """An open, schema-checked database; ``create`` makes a missing one, else a missing file is bad input."""
    path = Path(path)
    if not path.exists():
        if not create:
            raise ScalegateError(
                f"history database {path} does not exist",
                "add a run first: python -m scalegate history add results/<run> [--db FILE]",
            )
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as exc:
        raise _unusable(path, exc) from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        try:
            _check_schema(conn, path, create)
        except sqlite3.OperationalError as exc:
            raise _unusable(path, exc) from None
        except sqlite3.DatabaseError as exc:
            raise _bad(path, f"is not a readable SQLite file ({exc})") from None
        try:
            yield conn
        except sqlite3.OperationalError as exc:
            raise _unusable(path, exc) from None
        except sqlite3.DatabaseError as exc:
            raise _bad(path, f"is damaged ({exc})") from None
    finally:
        conn.close()


def _unusable(path: Path, exc: Exception) -> ScalegateError:
    """Locked past the busy timeout, read-only, unreachable, disk full: the file may be fine, its place is not."""
    return ScalegateError(
        f"history database {path} cannot be used: {exc}",
        "check that its directory is writable from this job and that no job holds it locked for minutes",
    )


def _check_schema(conn: sqlite3.Connection, path: Path, create: bool) -> None:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables and create:
        with transaction(conn):
            for statement in filter(str.strip, SCHEMA.split(";")):  # executescript would commit early
                conn.execute(statement)
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        return
    if not {"meta", "runs", "cases", "measurements"} <= tables:
        raise _bad(path, f"is not a scalegate history (tables: {sorted(tables) or 'none'})")
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None or row[0] != str(SCHEMA_VERSION):
        raise _bad(path, f"has schema version {row[0] if row else None!r}, this scalegate reads {SCHEMA_VERSION}")


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE: take the write lock first (waiting up to the busy timeout), commit or roll back."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def add(conn: sqlite3.Connection, run: Run, cases: list[CaseRow]) -> bool:
    """Store a run and its cases; False (and nothing written) when the run id is already there."""
    with transaction(conn):
        if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run.run_id,)).fetchone():
            return False
        added = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        conn.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)",
            (run.run_id, run.commit, run.date, run.profile, run.source, run.note, added),
        )
        for case in cases:
            conn.execute(
                "INSERT INTO cases VALUES (?, ?, ?, ?)", (run.run_id, case.case_key, case.case_id, case.status)
            )
            conn.executemany(
                "INSERT INTO measurements VALUES (?, ?, ?, ?)",
                [(run.run_id, case.case_key, m, float(v)) for m, v in case.metrics.items()],
            )
    return True


_ORDER = "ORDER BY r.date, r.added, r.run_id"


def runs(conn: sqlite3.Connection) -> list[tuple[Run, int]]:
    """Every run, oldest first, with its number of cases."""
    rows = conn.execute(
        "SELECT r.run_id, r.commit_id, r.date, r.profile, r.source, r.note, "
        f"(SELECT count(*) FROM cases c WHERE c.run_id = r.run_id) FROM runs r {_ORDER}"
    ).fetchall()
    return [(Run(run_id=a, commit=b, date=c, profile=d, source=e, note=f), n) for a, b, c, d, e, f, n in rows]


def series_keys(conn: sqlite3.Connection) -> list[tuple[str, str, str, str]]:
    """(profile, case_key, case_id, metric) of every series the history holds."""
    return conn.execute(
        "SELECT DISTINCT r.profile, m.case_key, c.case_id, m.metric FROM measurements m "
        "JOIN runs r ON r.run_id = m.run_id JOIN cases c ON c.run_id = m.run_id "
        "AND c.case_key = m.case_key ORDER BY r.profile, m.case_key, m.metric"
    ).fetchall()


def series(conn: sqlite3.Connection, profile: str, case_key: str, metric: str) -> list[Point]:
    """One case's metric over the profile's runs, oldest first."""
    rows = conn.execute(
        "SELECT r.run_id, r.commit_id, r.date, m.value FROM measurements m JOIN runs r "
        "ON r.run_id = m.run_id WHERE r.profile = ? AND m.case_key = ? AND m.metric = ? "
        f"{_ORDER}",
        (profile, case_key, metric),
    ).fetchall()
    return [Point(run_id=a, commit=b, date=c, value=v) for a, b, c, v in rows]


def case_runs(conn: sqlite3.Connection, case: str) -> list[tuple[Run, CaseRow]]:
    """Every run of a case (by id ``ddp-cnn-1x2`` or key ``ddp-cnn-1x2:tiny``), oldest first."""
    rows = conn.execute(
        "SELECT r.run_id, r.commit_id, r.date, r.profile, c.case_key, c.case_id, c.status FROM cases c "
        f"JOIN runs r ON r.run_id = c.run_id WHERE c.case_id = ? OR c.case_key = ? {_ORDER}",
        (case, case),
    ).fetchall()
    out = []
    for run_id, commit, date, profile, key, case_id, status in rows:
        metrics = dict(
            conn.execute(
                "SELECT metric, value FROM measurements WHERE run_id = ? AND case_key = ?", (run_id, key)
            ).fetchall()
        )
        out.append(
            (
                Run(run_id=run_id, commit=commit, date=date, profile=profile),
                CaseRow(case_key=key, case_id=case_id, status=status, metrics=metrics),
            )
        )
    return out


def known_cases(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT DISTINCT case_key FROM cases ORDER BY case_key")]
