"""What is particular to each backend: files, pragmas, schemas, secrets, open_store()."""

from __future__ import annotations

import secrets
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

import openagentcore.store
from openagentcore.store import (
    DEFAULT_SQLITE_PATH,
    CallKey,
    MemoryResultStore,
    PostgresResultStore,
    ResultStore,
    SQLiteResultStore,
    StoreSchemaError,
    StoreUnavailableError,
    open_store,
)
from openagentcore.store._sql import MIGRATIONS

# -- SQLite ---------------------------------------------------------------------------


def test_sqlite_store_uses_wal_and_records_its_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "calls.db"
    with SQLiteResultStore(str(path)) as store:
        assert store.path == str(path)
        assert repr(store) == f"SQLiteResultStore({str(path)!r})"

    connection = sqlite3.connect(path)
    try:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert connection.execute("PRAGMA user_version").fetchone() == (MIGRATIONS[-1].version,)
        indexes = {row[1] for row in connection.execute("PRAGMA index_list(openagentcore_calls)")}
        assert "openagentcore_calls_state_updated_idx" in indexes
    finally:
        connection.close()


def test_sqlite_store_refuses_a_schema_from_a_newer_release(tmp_path: Path) -> None:
    path = tmp_path / "calls.db"
    SQLiteResultStore(path).close()
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA user_version = 99")
    connection.close()

    with pytest.raises(StoreSchemaError, match="upgrade openagentcore"):
        SQLiteResultStore(path)


def test_sqlite_store_in_a_missing_directory_says_what_to_check(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError, match="directory exists"):
        SQLiteResultStore(tmp_path / "missing" / "calls.db")


def test_sqlite_writer_blocked_past_busy_timeout_raises_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "calls.db"
    store = SQLiteResultStore(path, busy_timeout=0.05)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreUnavailableError, match="locked"):
            store.prune(older_than=0)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert store.prune(older_than=0) == 0  # usable again once the lock is gone
    store.close()


# -- PostgreSQL -----------------------------------------------------------------------


@pytest.mark.postgres
def test_postgres_store_refuses_a_schema_from_a_newer_release(
    postgres_schema: tuple[str, str], fresh_table: str
) -> None:
    import psycopg

    dsn, schema = postgres_schema
    PostgresResultStore(dsn, schema=schema, table=fresh_table).close()
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            f'INSERT INTO "{schema}"."{fresh_table}_migrations" (version, description) '
            "VALUES (99, 'from the future')"
        )

    with pytest.raises(StoreSchemaError, match="upgrade openagentcore"):
        PostgresResultStore(dsn, schema=schema, table=fresh_table)


@pytest.mark.postgres
def test_postgres_store_never_shows_the_password(
    postgres_schema: tuple[str, str], fresh_table: str
) -> None:
    dsn, schema = postgres_schema
    # Trust authentication ignores the password, so this connects.
    with_password = dsn.replace("://postgres@", "://postgres:hunter2-secret@")
    assert "hunter2-secret" in with_password

    with PostgresResultStore(with_password, schema=schema, table=fresh_table) as store:
        assert "hunter2-secret" not in repr(store)
        assert fresh_table in repr(store)


@pytest.mark.postgres
def test_postgres_store_runs_with_only_data_privileges_once_created(
    postgres_schema: tuple[str, str], fresh_table: str
) -> None:
    import psycopg

    dsn, schema = postgres_schema
    PostgresResultStore(dsn, schema=schema, table=fresh_table).close()
    role = f"oac_limited_{secrets.token_hex(4)}"
    tables = f'"{schema}"."{fresh_table}", "{schema}"."{fresh_table}_migrations"'
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        admin.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
        admin.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO "{role}"')
        try:
            limited_dsn = dsn.replace("://postgres@", f"://{role}@")
            with PostgresResultStore(limited_dsn, schema=schema, table=fresh_table) as store:
                assert store.claim(
                    CallKey("s", "t", "c"),
                    function_name="f",
                    arguments_hash="h",
                    owner="o",
                    lease_seconds=5,
                ).won
        finally:
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')


@pytest.mark.postgres
def test_postgres_store_recovers_when_the_server_drops_its_connections(
    postgres_schema: tuple[str, str], fresh_table: str
) -> None:
    import psycopg

    dsn, schema = postgres_schema
    application = f"oac_dropped_{secrets.token_hex(4)}"
    tagged_dsn = f"{dsn}{'&' if '?' in dsn else '?'}application_name={application}"
    key = CallKey("s", "t", "c")
    with PostgresResultStore(tagged_dsn, schema=schema, table=fresh_table) as store:
        store.claim(key, function_name="f", arguments_hash="h", owner="o", lease_seconds=5)
        with psycopg.connect(dsn, autocommit=True) as admin:
            dropped = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (application,),
            ).fetchone()
        assert dropped is not None
        assert dropped[0] >= 1

        record = store.get(key)  # the pool notices the dead connection and opens another

        assert record is not None
        assert record.owner == "o"


def test_unreachable_postgres_raises_unavailable_without_the_password() -> None:
    with pytest.raises(StoreUnavailableError, match="could not connect") as caught:
        PostgresResultStore(
            "postgresql://user:hunter2-secret@127.0.0.1:1/db?connect_timeout=1",
            pool_timeout=0.5,
        )
    assert "hunter2-secret" not in str(caught.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [("table", "Calls"), ("table", "calls; drop"), ("schema", "1abc"), ("table", "x" * 41)],
)
def test_postgres_names_are_checked_before_connecting(field: str, value: str) -> None:
    with pytest.raises(ValueError, match=field):
        PostgresResultStore("postgresql://unused", **{field: value})  # type: ignore[arg-type]


def test_postgres_store_without_psycopg_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['psycopg'] = None; sys.modules['psycopg_pool'] = None\n"
        "import openagentcore.store as store\n"
        "try:\n"
        "    store.PostgresResultStore('postgresql://x')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout

    assert "pip install 'openagentcore[postgres]'" in output


# -- open_store -----------------------------------------------------------------------


def test_open_store_returns_a_given_store_as_is() -> None:
    store = MemoryResultStore()

    assert open_store(store) is store
    assert isinstance(store, ResultStore)


@pytest.mark.parametrize("as_path", [False, True])
def test_open_store_opens_sqlite_for_paths(tmp_path: Path, as_path: bool) -> None:
    path = tmp_path / "calls.db"

    with closing(open_store(path if as_path else str(path))) as store:
        assert isinstance(store, SQLiteResultStore)
        assert store.path == str(path)


def test_open_store_defaults_to_a_durable_file_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    with closing(open_store(None)) as store:
        assert isinstance(store, SQLiteResultStore)
    assert (tmp_path / DEFAULT_SQLITE_PATH).exists()


@pytest.mark.parametrize("url", ["postgresql://db.internal/calls", "POSTGRES://db/calls"])
def test_open_store_opens_postgres_for_postgres_urls(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []

    def fake_postgres_store(dsn: str) -> ResultStore:
        opened.append(dsn)
        return MemoryResultStore()

    monkeypatch.setattr(openagentcore.store, "PostgresResultStore", fake_postgres_store)

    open_store(url)

    assert opened == [url]


def test_sqlite_get_many_finds_its_rows_through_the_key_index(tmp_path: Path) -> None:
    """A plain ``WHERE (session_id, turn_id, call_id) IN (VALUES ...)`` made SQLite scan
    the whole table for every batch of lookups (issue 26): the statement ``get_many``
    sends must search the primary key instead."""
    store = SQLiteResultStore(tmp_path / "calls.db")
    try:
        sql = store._get_many_sql(3)
        with closing(sqlite3.connect(tmp_path / "calls.db")) as raw:
            plan = raw.execute(f"EXPLAIN QUERY PLAN {sql}", ["s", "t", "c"] * 3).fetchall()
    finally:
        store.close()
    steps = [str(row[-1]) for row in plan]
    assert any(step.startswith("SEARCH openagentcore_calls USING INDEX") for step in steps), steps
    assert not any(step.startswith("SCAN openagentcore_calls") for step in steps), steps
