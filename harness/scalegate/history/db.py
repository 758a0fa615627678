"""Where the history is kept: a SQLite file (the embedded default) or a PostgreSQL server (a team's clusters).

``--db`` / ``SCALEGATE_HISTORY_DB`` names it: a path is a SQLite file, ``postgresql://`` (or ``postgres://``) a
server, ``sqlite:///PATH`` a file too (SQLAlchemy's form: ``sqlite:///history.sqlite`` is relative,
``sqlite:////srv/history.sqlite`` absolute). Any other URL is refused with a HINT, never taken for a file name: a
mistyped URL must not silently start a new history under ``./postgresql:/...``.

Both stores answer one small interface (``Db``): queries written once with ``?`` placeholders, a write
transaction that serialises writers (SQLite's ``BEGIN IMMEDIATE``; PostgreSQL's row locks and an advisory lock
for migrations), and errors turned into a ``ScalegateError`` naming the store (its URL without a password).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ContextManager, Protocol, Sequence

from scalegate.contract.errors import ScalegateError

DEFAULT_PATH = Path("results") / "history.sqlite"  # under the directory the command runs in
SQLITE, POSTGRESQL = "sqlite", "postgresql"
_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):(?://|/)?")
_KNOWN = {"postgresql": POSTGRESQL, "postgres": POSTGRESQL, "sqlite": SQLITE}
# names a user may reach for that no history store here opens, even written without "//"
_FOREIGN = ("mysql", "mariadb", "mssql", "oracle", "redis", "mongodb", "http", "https", "file", "s3", "gs")


@dataclass(frozen=True, kw_only=True)
class Location:
    kind: str  # SQLITE or POSTGRESQL
    target: str  # the file's path, or the server's URL as given
    name: str  # what messages show: the path, or the URL without its password


def _redact(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{parts.username}:***@{host}" if parts.username else f":***@{host}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _sqlite(path: str) -> Location:
    if Path(path).is_dir():
        raise ScalegateError(
            f"history database {path} is a directory, not a SQLite file",
            "pass a SQLite file path, e.g. --db results/history.sqlite (or SCALEGATE_HISTORY_DB)",
        )
    return Location(kind=SQLITE, target=path, name=path)


def locate(given: str | Path) -> Location:
    """``given`` as a store; a URL of a kind no store here opens is bad input."""
    text = str(given)
    found = _URL.match(text)
    scheme = found["scheme"].lower() if found else ""
    is_url = found is not None and ("://" in text or scheme in _KNOWN or scheme in _FOREIGN)
    if not is_url:
        return _sqlite(text)
    kind = _KNOWN.get(scheme)
    if kind == POSTGRESQL:
        if "://" not in text:
            text = f"{scheme}://{text.split(':', 1)[1].lstrip('/')}"
        return Location(kind=POSTGRESQL, target=text, name=_redact(text))
    if kind == SQLITE:  # SQLAlchemy's form, which MLflow and Optuna take too: three slashes, then the file's path
        rest = text.split(":", 1)[1]
        if rest.startswith("//") and not rest.startswith("///") and rest != "//":
            raise ScalegateError(
                f"history database {text} names a host, which a SQLite file has not",
                "write sqlite:///relative/path.sqlite or sqlite:////absolute/path.sqlite (or the path alone)",
            )
        path = rest[3:] if rest.startswith("///") else "" if rest == "//" else rest
        if not path:
            raise ScalegateError(f"history database {text} names no file", "write sqlite:///path/to/history.sqlite")
        return _sqlite(path)
    raise ScalegateError(
        f"history database {_redact(text)} is a {scheme}:// URL, which the history cannot open",
        "pass a SQLite file path (e.g. results/history.sqlite) or a PostgreSQL URL "
        "(postgresql://USER@HOST:PORT/DATABASE) with --db or SCALEGATE_HISTORY_DB",
    )


class Db(Protocol):
    """An open history store, its schema checked."""

    kind: str
    name: str

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]: ...

    def run(self, sql: str, params: Sequence[Any] = ()) -> int: ...

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    def transaction(self) -> ContextManager[None]: ...

    def tables(self) -> set[str]: ...
