"""The history in one SQLite file: the embedded default, no server.

Several jobs may add runs at once: every write is one ``BEGIN IMMEDIATE`` transaction (the writer takes the lock
before reading, so two writers never both decide a run is new), and a busy writer waits up to ``BUSY_TIMEOUT_S``
for the lock. The journal stays the default rollback journal, not WAL: WAL needs memory shared between the
processes. SQLite's locking itself is unreliable on network filesystems (its documentation says so), so a team
whose clusters share one history keeps it on a PostgreSQL server instead (postgres_db.py).
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any, Iterator, Sequence

from scalegate.contract.errors import ScalegateError
from scalegate.history.db import SQLITE, Location

BUSY_TIMEOUT_S = 120.0


def _bad(name: str, why: str) -> ScalegateError:
    return ScalegateError(
        f"history database {name} {why}",
        "pass the right file with --db (or SCALEGATE_HISTORY_DB), or move the broken file away "
        "and add the runs again with `python -m scalegate history add results/<run>`",
    )


def _unusable(name: str, exc: Exception) -> ScalegateError:
    """Locked past the busy timeout, read-only, unreachable, disk full: the file may be fine, its place is not."""
    return ScalegateError(
        f"history database {name} cannot be used: {exc}",
        "check that its directory is writable from this job and that no job holds it locked for minutes",
    )


class SqliteDb:
    kind = SQLITE

    def __init__(self, conn: sqlite3.Connection, name: str) -> None:
        self.conn = conn
        self.name = name

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return self.conn.execute(sql, params).fetchall()

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self.conn.execute(sql, params).rowcount

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.conn.executemany(sql, rows)

    @contextlib.contextmanager
    def transaction(self, exclusive: bool = False) -> Iterator[None]:
        """BEGIN IMMEDIATE: take the write lock first (waiting up to the busy timeout), commit or roll back."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def tables(self) -> set[str]:
        return {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


@contextlib.contextmanager
def open(where: Location, *, create: bool) -> Iterator[SqliteDb]:
    """The file, opened; ``create`` makes a missing one, else a missing file is bad input."""
    path = Path(where.target)
    if not path.exists():
        if not create:
            raise ScalegateError(
                f"history database {where.name} does not exist",
                "add a run first: python -m scalegate history add results/<run> [--db FILE]",
            )
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as exc:
        raise _unusable(where.name, exc) from None
    try:
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # a file that is not a database fails here
        except sqlite3.OperationalError as exc:
            raise _unusable(where.name, exc) from None
        except sqlite3.DatabaseError as exc:
            raise _bad(where.name, f"is not a readable SQLite file ({exc})") from None
        try:
            yield SqliteDb(conn, where.name)
        except sqlite3.OperationalError as exc:
            raise _unusable(where.name, exc) from None
        except sqlite3.DatabaseError as exc:
            raise _bad(where.name, f"is damaged ({exc})") from None
    finally:
        conn.close()
