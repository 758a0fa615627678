"""The history's two stores for its tests: a SQLite file, and a database of its own on a real PostgreSQL server.

The server is the one ``db/local-postgres.sh start`` runs; its URL comes from ``SCALEGATE_TEST_POSTGRES_URL``
(.ci/run exports it). Without it a PostgreSQL test skips, saying how to get one, except where
``SCALEGATE_REQUIRE_POSTGRES`` is set (CI): there it fails, so a server that did not start cannot pass as green.
Each test gets a fresh database on that server, dropped afterwards.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

import pytest

from benchmarks.history_stores import fresh_database

URL_ENV = "SCALEGATE_TEST_POSTGRES_URL"
REQUIRE_ENV = "SCALEGATE_REQUIRE_POSTGRES"
STORES = ("sqlite", "postgresql")


def server_url() -> str:
    """The test server's URL; skips (or fails, where CI requires it) without one."""
    url = os.environ.get(URL_ENV, "")
    if not url and os.environ.get(REQUIRE_ENV):
        pytest.fail(f"{REQUIRE_ENV} is set but {URL_ENV} is not: the PostgreSQL server did not start")
    if not url:
        pytest.skip(f"no PostgreSQL server: export {URL_ENV}=$(db/local-postgres.sh start) (.ci/run does this in CI)")
    return url


@contextlib.contextmanager
def store_location(kind: str, tmp_path: Path) -> Iterator[str]:
    """Where a test keeps its history: a file under ``tmp_path``, or a fresh database on the test server."""
    if kind == "sqlite":
        yield str(tmp_path / "history.sqlite")
        return
    with fresh_database(server_url()) as url:
        yield url


def fixture():
    """The ``history_db`` fixture for a test module (``history_db = stores.fixture()``): a history store location
    for ``--db``, once a SQLite file and once a database on the PostgreSQL test server."""

    @pytest.fixture(params=STORES)
    def history_db(request, tmp_path) -> Iterator[str]:
        with store_location(request.param, tmp_path) as where:
            yield where

    return history_db
