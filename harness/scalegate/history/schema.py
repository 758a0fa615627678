"""The history's tables, one schema for both stores, and the numbered migrations that build and upgrade it.

A store records its version in ``meta``; opening one older than ``SCHEMA_VERSION`` runs the missing migrations in
one write transaction (SQLite's write lock, PostgreSQL's advisory lock), reading the version again under the lock,
so two jobs meeting an old store migrate it once. A store newer than this scalegate is refused. The SQL is the
subset both stores speak (``ON CONFLICT``, ``DOUBLE PRECISION``: REAL is single precision on PostgreSQL).

1. runs (id, commit, date, profile, where the run directory was, a note), each case's status, each metric's value.
2. a run's cluster and hardware (what a series is keyed by) and its software versions (``run_versions``: what the
   history draws a version change from); runs added before it get them from their profile name.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Callable

from scalegate.contract.errors import ScalegateError
from scalegate.plan import hostinfo

if TYPE_CHECKING:
    from scalegate.history.db import Db

SCHEMA_VERSION = 2
TABLES = {"meta", "runs", "cases", "measurements"}


def _v1(db: Db) -> None:
    for statement in (
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE runs (run_id TEXT PRIMARY KEY, commit_id TEXT NOT NULL, date TEXT NOT NULL, "
        "profile TEXT NOT NULL, source TEXT NOT NULL, note TEXT NOT NULL DEFAULT '', added TEXT NOT NULL)",
        "CREATE TABLE cases (run_id TEXT NOT NULL REFERENCES runs(run_id), case_key TEXT NOT NULL, "
        "case_id TEXT NOT NULL, status TEXT NOT NULL, PRIMARY KEY (run_id, case_key))",
        "CREATE TABLE measurements (run_id TEXT NOT NULL, case_key TEXT NOT NULL, metric TEXT NOT NULL, "
        "value DOUBLE PRECISION NOT NULL, PRIMARY KEY (run_id, case_key, metric))",
    ):
        db.run(statement)


def _v2(db: Db) -> None:
    db.run("ALTER TABLE runs ADD COLUMN cluster TEXT NOT NULL DEFAULT ''")
    db.run("ALTER TABLE runs ADD COLUMN hardware TEXT NOT NULL DEFAULT ''")
    db.run(
        "CREATE TABLE run_versions (run_id TEXT NOT NULL REFERENCES runs(run_id), package TEXT NOT NULL, "
        "version TEXT NOT NULL, PRIMARY KEY (run_id, package))"
    )
    for run_id, profile in db.rows("SELECT run_id, profile FROM runs"):
        parts = hostinfo.parse_profile(profile)
        db.run("UPDATE runs SET cluster = ?, hardware = ? WHERE run_id = ?", (parts.cluster, parts.hardware, run_id))
        db.many("INSERT INTO run_versions VALUES (?, ?, ?)", [(run_id, k, v) for k, v in parts.versions.items()])


MIGRATIONS: dict[int, Callable[["Db"], None]] = {1: _v1, 2: _v2}


def _version(db: Db) -> int:
    if "meta" not in db.tables():
        return 0
    row = db.rows("SELECT value FROM meta WHERE key = 'schema_version'")
    try:
        return int(row[0][0]) if row else -1
    except ValueError:
        return -1


def ensure(db: Db, *, create: bool) -> None:
    """The store at this scalegate's schema: made where ``create`` and empty, migrated where older; else bad input."""
    tables = db.tables()
    if not tables:
        if not create:
            raise ScalegateError(
                f"history database {db.name} holds no scalegate history (tables: none)",
                "add a run first: python -m scalegate history add results/<run> --db ...",
            )
    elif not TABLES <= tables:
        raise ScalegateError(
            f"history database {db.name} is not a scalegate history (tables: {sorted(tables)})",
            "pass the right store with --db (or SCALEGATE_HISTORY_DB)",
        )
    version = _version(db) if tables else 0
    if version == SCHEMA_VERSION:
        return
    if version < 0 or version > SCHEMA_VERSION:
        found = "no readable schema version" if version < 0 else f"schema version {version}"
        raise ScalegateError(
            f"history database {db.name} has {found}, this scalegate reads up to {SCHEMA_VERSION}",
            "use the scalegate that wrote it (a newer one reads it), or pass another store with --db",
        )
    migrate(db)


def migrate(db: Db) -> None:
    """Every missing migration in one write transaction, the version read again under its lock."""
    with db.transaction(exclusive=True):
        start = _version(db)
        if start == SCHEMA_VERSION:
            return  # another job migrated it while this one waited
        for number in range(start + 1, SCHEMA_VERSION + 1):
            MIGRATIONS[number](db)
        db.run(
            "INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(SCHEMA_VERSION),),
        )
    if start > 0:
        print(f"history: migrated {db.name} from schema {start} to {SCHEMA_VERSION}", file=sys.stderr)
