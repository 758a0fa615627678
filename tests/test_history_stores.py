"""The history's stores: which URLs it opens, what it says when it cannot, re-ingest and migrations, on a SQLite
file and on a database of a real PostgreSQL server (tests/stores.py)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from scalegate.history import schema, store
from tests import stores
from tests.conftest import ROOT
from tests.runs import case, run, series_runs, write_run

history_db = stores.fixture()


def _nothing_made_but(where: Path, kept: set[str]) -> None:
    assert {p.name for p in where.iterdir()} == kept, "a URL was taken for a file name"


@pytest.mark.parametrize(
    "url, said",
    [
        ("mysql://root@127.0.0.1:3306/history", "is a mysql:// URL, which the history cannot open"),
        ("https://example.org/history.sqlite", "is a https:// URL, which the history cannot open"),
        ("mysql:history", "is a mysql:// URL, which the history cannot open"),
        ("sqlite://", "names no file"),
        ("sqlite://history.sqlite", "names a host, which a SQLite file has not"),
        (".", "history database . is a directory, not a SQLite file"),
    ],
)
def test_a_url_of_a_kind_the_history_cannot_open_is_bad_input_and_makes_no_file(tmp_path, monkeypatch, url, said):
    nightly = write_run(tmp_path / "nightly-1", case("ddp-cnn-1x2", 0.8))
    monkeypatch.chdir(tmp_path)
    for command in (("add", nightly), ("list",), ("check",), ("report", "--out", "page")):
        done = run("history", *command, "--db", url)
        assert done.returncode == 2 and said in done.stderr, (command, done.stderr)
        assert "HINT: pass a SQLite file path" in done.stderr or "HINT: write sqlite:///" in done.stderr
    _nothing_made_but(tmp_path, {"nightly-1"})


def test_a_postgresql_server_out_of_reach_is_an_error_naming_it_never_a_file(tmp_path, monkeypatch):
    """The issue's reproduction: SCALEGATE_HISTORY_DB a server URL, from a fresh directory, as a new user would (the
    command in this process: a real subprocess of it runs in tests/test_history.py's nightly)."""
    nightly = write_run(tmp_path / "nightly-1", case("ddp-cnn-1x2", 0.8))
    work = tmp_path / "work"
    work.mkdir()
    url = "postgresql://postgres:s3cret@127.0.0.1:1/postgres"  # port 1: nothing listens, refused at once
    monkeypatch.setenv("SCALEGATE_HISTORY_DB", url)
    monkeypatch.chdir(work)
    for command in (("add", str(nightly)), ("list",), ("report", "--out", "page")):
        done = run("history", *command)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert "history database postgresql://postgres:***@127.0.0.1:1/postgres cannot be reached" in done.stderr
        assert "HINT: check that the server runs" in done.stderr and "Traceback" not in done.stderr
        assert "s3cret" not in done.stderr + done.stdout
    _nothing_made_but(work, set())


def test_a_postgresql_url_without_psycopg_names_the_extra_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if psycopg were not installed
    done = run("history", "list", "--db", "postgresql://postgres@127.0.0.1:1/postgres")
    assert done.returncode == 2 and "its client, psycopg 3, is not installed" in done.stderr
    assert "HINT: install the history extra: pip install 'scalegate[history]'" in done.stderr


def test_a_sqlite_url_is_the_file_it_names_relative_after_three_slashes_as_in_sqlalchemy(tmp_path, monkeypatch):
    """``sqlite:////abs/h.sqlite`` is that absolute path; ``sqlite:///h.sqlite`` is h.sqlite here (SQLAlchemy's and
    MLflow's reading), not /h.sqlite at the filesystem's root."""
    nightly = write_run(tmp_path / "nightly-1", case("ddp-cnn-1x2", 0.8))
    done = run("history", "add", nightly, "--db", f"sqlite:///{tmp_path}/h.sqlite")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "h.sqlite").exists() and run("history", "list", "--db", tmp_path / "h.sqlite").returncode == 0
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert run("history", "add", nightly, "--db", "sqlite:///rel.sqlite").returncode == 0
    assert (work / "rel.sqlite").exists() and not Path("/rel.sqlite").exists()


def _dump(where: str) -> dict[str, list[tuple]]:
    with store.connect(where) as db:
        return {t: sorted(db.rows(f"SELECT * FROM {t}")) for t in sorted(db.tables())}


def test_a_reingest_of_a_run_changes_nothing(tmp_path, history_db):
    runs = series_runs(tmp_path, 3)
    assert run("history", "add", *runs, "--db", history_db).returncode == 0
    before = _dump(history_db)
    again = run("history", "add", *runs, "--db", history_db)
    assert again.returncode == 0 and again.stdout.count("already there, unchanged:") == 3, again.stdout
    changed = write_run(tmp_path / "again" / "nightly-00", case("ddp-cnn-1x2", 0.1, commit="other"))  # same id
    assert "already there, unchanged: nightly-00" in run("history", "add", changed, "--db", history_db).stdout
    assert _dump(history_db) == before
    assert len(before["runs"]) == 3 and len(before["measurements"]) == 3 * 2 * 6  # runs x cases x metrics


V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (run_id TEXT PRIMARY KEY, commit_id TEXT NOT NULL, date TEXT NOT NULL, profile TEXT NOT NULL,
    source TEXT NOT NULL, note TEXT NOT NULL DEFAULT '', added TEXT NOT NULL);
CREATE TABLE cases (run_id TEXT NOT NULL REFERENCES runs(run_id), case_key TEXT NOT NULL, case_id TEXT NOT NULL,
    status TEXT NOT NULL, PRIMARY KEY (run_id, case_key));
CREATE TABLE measurements (run_id TEXT NOT NULL, case_key TEXT NOT NULL, metric TEXT NOT NULL, value REAL NOT NULL,
    PRIMARY KEY (run_id, case_key, metric));
INSERT INTO meta VALUES ('schema_version', '1');
INSERT INTO runs VALUES ('n1', 'c1', '2026-11-01', 'cuda-h100-x8-torch2.12.0-cuda12.6-nccl2.26.2', '', '', '2026-11-01');
INSERT INTO cases VALUES ('n1', 'ddp-cnn-1x2:tiny', 'ddp-cnn-1x2', 'ok');
INSERT INTO measurements VALUES ('n1', 'ddp-cnn-1x2:tiny', 'efficiency', 0.8);
"""


def test_a_history_of_schema_1_is_migrated_once_its_runs_kept_and_their_versions_read_from_the_profile(tmp_path, capfd):
    path = tmp_path / "old.sqlite"
    sqlite3.connect(path).executescript(V1).close()
    with store.connect(path) as db:
        ((old, n),) = store.runs(db)
        assert db.rows("SELECT value FROM meta")[0][0] == str(schema.SCHEMA_VERSION)
    assert n == 1 and old.hardware == "cuda-h100-x8" and old.cluster == ""
    assert dict(old.versions) == {"torch": "2.12.0", "cuda": "12.6", "nccl": "2.26.2"}
    assert f"migrated {path} from schema 1 to {schema.SCHEMA_VERSION}" in capfd.readouterr().err
    with store.connect(path, create=True) as db:  # once: the next open finds it current
        assert store.add(db, store.Run(run_id="n2", commit="c2", date="2026-11-02", profile=old.profile), [])
    assert "migrated" not in capfd.readouterr().err


def test_a_store_newer_than_this_scalegate_or_foreign_to_it_is_refused(tmp_path, history_db):
    assert run("history", "add", *series_runs(tmp_path, 1), "--db", history_db).returncode == 0
    with store.connect(history_db) as db:
        with db.transaction():
            db.run("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    done = run("history", "list", "--db", history_db)
    assert done.returncode == 2 and "has schema version 99, this scalegate reads up to" in done.stderr
    assert "HINT: " in done.stderr
    with _raw(history_db) as db:
        db.run("DROP TABLE measurements")
    done = run("history", "check", "--db", history_db)
    assert done.returncode == 2 and "is not a scalegate history (tables: " in done.stderr


def _raw(where: str):
    """The store opened without its schema check (to break it)."""
    from scalegate.history import db as dbmod
    from scalegate.history import postgres_db, sqlite_db

    located = dbmod.locate(where)
    backend = postgres_db if located.kind == dbmod.POSTGRESQL else sqlite_db
    return backend.open(located, create=False)


def test_the_store_benchmark_runs_report_over_both_stores(tmp_path):
    """benchmarks/history_stores.py at a tiny size: it times report and check over both stores and says what it
    measured, each figure against its budget."""
    url = stores.server_url()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.history_stores", "--runs", "30", "--cases", "2", "--repeat", "1"]
        + ["--permutations", "19", "--work", str(tmp_path), "--postgres-url", url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for said in ("sqlite     report median", "postgresql report median", "postgresql page", "postgresql - sqlite"):
        assert said in done.stdout, done.stdout
    for said in ("sqlite     check median", "postgresql check median", "within its budget of 5 s", "budget of 15 MB"):
        assert said in done.stdout, done.stdout
    for said in ("sqlite     check as a fresh process", "postgresql check as a fresh process"):
        assert said in done.stdout, done.stdout
    assert (tmp_path / "page-postgresql" / "index.html").exists() and (tmp_path / "page-sqlite" / "index.html").exists()


def test_the_jobs_benchmark_times_a_report_one_series_at_a_time_and_several(tmp_path):
    """benchmarks/history_jobs.py at a tiny size: both reports run and it says what it measured."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.history_jobs", "--runs", "30", "--cases", "2", "--repeat", "1"]
        + ["--jobs", "2", "--work", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for said in ("--jobs 1: report median", "--jobs 2: report median", "--jobs 1 / --jobs 2, medians: x"):
        assert said in done.stdout, done.stdout
