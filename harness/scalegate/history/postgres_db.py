"""The history on a PostgreSQL server: one store for a team's clusters (``SCALEGATE_HISTORY_DB=postgresql://...``).

Its tables live in the schema ``scalegate`` of the database the URL names, so the history can share a database
with other tools. Writers run at once without a lock of their own: each add is one transaction whose first
statement inserts the run's row with ``ON CONFLICT DO NOTHING`` (a second writer of the same run waits on the
first's row lock, then finds it there and writes nothing); migrations take a transaction-scoped advisory lock,
so two jobs meeting an old schema migrate it once.

psycopg 3 is the client, an optional extra (``pip install 'scalegate[history]'``; ./setup.sh installs it).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

from scalegate.contract.errors import ScalegateError
from scalegate.history.db import POSTGRESQL, Location

NAMESPACE = "scalegate"
CONNECT_TIMEOUT_S = 10
MIGRATION_LOCK = 0x5CA1E6A7E  # pg_advisory_xact_lock's key while a schema is created or migrated
REACH_HINT = (
    "check that the server runs and that the URL's host, port, user and database are right "
    "(postgresql://USER[:PASSWORD]@HOST:PORT/DATABASE); db/local-postgres.sh start runs a local server to try"
)


class PostgresDb:
    kind = POSTGRESQL

    def __init__(self, conn: Any, name: str) -> None:
        self.conn = conn
        self.name = name

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return self.conn.execute(sql.replace("?", "%s"), params).fetchall()

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self.conn.execute(sql.replace("?", "%s"), params).rowcount

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            with self.conn.cursor() as cur:
                cur.executemany(sql.replace("?", "%s"), rows)

    @contextlib.contextmanager
    def transaction(self, exclusive: bool = False) -> Iterator[None]:
        """One transaction; ``exclusive`` (schema changes) also holds the migration lock and makes the schema."""
        with self.conn.transaction():
            if exclusive:
                self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                self.conn.execute(f"CREATE SCHEMA IF NOT EXISTS {NAMESPACE}")
            yield

    def tables(self) -> set[str]:
        found = self.conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (NAMESPACE,)
        )
        return {r[0] for r in found.fetchall()}


def _client() -> Any:
    try:
        import psycopg
    except ImportError:
        return None
    return psycopg


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@contextlib.contextmanager
def open(where: Location, *, create: bool) -> Iterator[PostgresDb]:
    """A connection to the server, its search path the history's schema; bad input when it cannot be had."""
    psycopg = _client()
    if psycopg is None:
        raise ScalegateError(
            f"history database {where.name} is a PostgreSQL server, and its client, psycopg 3, is not installed",
            "install the history extra: pip install 'scalegate[history]' (./setup.sh installs it), "
            "or pip install 'psycopg[binary]>=3.1,<4'",
        )
    try:
        given = psycopg.conninfo.conninfo_to_dict(where.target)
        extra = {} if "connect_timeout" in given else {"connect_timeout": CONNECT_TIMEOUT_S}
        conn = psycopg.connect(where.target, autocommit=True, **extra)
    except psycopg.ProgrammingError as exc:
        raise ScalegateError(
            f"history database {where.name} is not a PostgreSQL URL it can use: {_first_line(exc)}",
            "write it as postgresql://USER[:PASSWORD]@HOST:PORT/DATABASE",
        ) from None
    except psycopg.Error as exc:
        raise ScalegateError(
            f"history database {where.name} cannot be reached: {_first_line(exc)}", REACH_HINT
        ) from None
    try:
        conn.execute(f"SET search_path TO {NAMESPACE}")
        yield PostgresDb(conn, where.name)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise ScalegateError(
            f"history database {where.name} refused this user: {_first_line(exc)}",
            f"grant the user CREATE on the database (to make the schema {NAMESPACE}) and use of its tables",
        ) from None
    except psycopg.OperationalError as exc:
        raise ScalegateError(f"history database {where.name} cannot be used: {_first_line(exc)}", REACH_HINT) from None
    except psycopg.Error as exc:
        raise ScalegateError(
            f"history database {where.name} cannot be used: {_first_line(exc)}",
            f"the schema {NAMESPACE} of that database may hold something else than a scalegate history: "
            "point --db at another database, or drop that schema",
        ) from None
    finally:
        conn.close()
