"""Store inputs that used to crash or leak (issue 13): file permissions, damaged
files and rows, and ids PostgreSQL cannot index or hold."""

from __future__ import annotations

import os
import secrets
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from openagentcore.store import (
    CallKey,
    PostgresResultStore,
    SQLiteResultStore,
    StoreCorruptError,
    StoreError,
    StoreKeyError,
    StoreUnavailableError,
)

from ._support import POSTGRES_DSN_ENV

KEY = CallKey(session_id="se_1", turn_id="tu_1", call_id="call_1")


def _claim(store: SQLiteResultStore | PostgresResultStore, key: CallKey, name: str = "f") -> None:
    store.claim(key, function_name=name, arguments_hash="h", owner="me", lease_seconds=30)


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.mark.usefixtures("umask_022")
def test_sqlite_files_are_private_to_their_owner(tmp_path: Path) -> None:
    """Saved results are function outputs in clear text; they were created 0644."""
    path = tmp_path / "calls.db"
    store = SQLiteResultStore(path)
    try:
        _claim(store, KEY)
        store.save_result(KEY, owner="me", result={"type": "x", "output": "secret"})
        files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
        modes = {file.name: stat.S_IMODE(file.stat().st_mode) for file in files}
    finally:
        store.close()
    assert modes == {"calls.db": 0o600, "calls.db-wal": 0o600, "calls.db-shm": 0o600}


@pytest.mark.usefixtures("umask_022")
def test_an_existing_sqlite_file_keeps_its_permissions(tmp_path: Path) -> None:
    path = tmp_path / "calls.db"
    SQLiteResultStore(path).close()
    path.chmod(0o640)
    SQLiteResultStore(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_file_that_is_not_a_database_is_a_store_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "calls.db"
    path.write_bytes(b"this is not SQLite " * 100)
    with pytest.raises(StoreCorruptError) as caught:
        SQLiteResultStore(path)
    assert str(path) in str(caught.value)
    assert not isinstance(caught.value, StoreUnavailableError)


def test_a_row_with_bad_json_is_a_store_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "calls.db"
    store = SQLiteResultStore(path)
    try:
        _claim(store, KEY)
        store.save_result(KEY, owner="me", result={"type": "x"})
        with sqlite3.connect(path) as raw:
            raw.execute("UPDATE openagentcore_calls SET result = '{not json'")
        with pytest.raises(StoreCorruptError, match="cannot be read") as caught:
            store.get(KEY)
        with pytest.raises(StoreCorruptError):
            store.find(session_id="se_1")
    finally:
        store.close()
    assert str(path) in str(caught.value)


@pytest.fixture
def postgres() -> Iterator[PostgresResultStore]:
    dsn = os.environ.get(POSTGRES_DSN_ENV)
    if not dsn:
        pytest.skip(f"set {POSTGRES_DSN_ENV} to run the PostgreSQL store tests")
    import psycopg

    schema = f"oac_test_{secrets.token_hex(4)}"
    store = PostgresResultStore(dsn, schema=schema)
    try:
        yield store
    finally:
        store.close()
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("key", "name"),
    [
        (CallKey("se_1", "tu_1", "call\x00evil"), "f"),
        (CallKey("se_1", "tu_1", "call_1"), "f\x00"),
        (CallKey("se\x00", "tu_1", "call_1"), "f"),
    ],
    ids=["nul-in-call-id", "nul-in-function-name", "nul-in-session-id"],
)
def test_postgres_refuses_nul_permanently(
    postgres: PostgresResultStore, key: CallKey, name: str
) -> None:
    """These raised a raw psycopg.DataError that crashed ``serve``."""
    with pytest.raises(StoreKeyError) as caught:
        _claim(postgres, key, name)
    assert isinstance(caught.value, StoreError)
    assert not isinstance(caught.value, StoreUnavailableError)
    assert "evil" not in str(caught.value), "the message names the problem, not the value"
    # The store still works for ordinary calls afterwards.
    _claim(postgres, KEY)
    assert postgres.get(KEY) is not None


@pytest.mark.postgres
def test_postgres_stores_ids_longer_than_its_index_allows(
    postgres: PostgresResultStore,
) -> None:
    """An 8 KB random id (incompressible) broke the 2,704-byte btree limit of the
    primary key: StoreUnavailableError, retried forever. Keys are now unique by digest."""
    long_call = CallKey("se_1", "tu_1", secrets.token_hex(4000))
    long_session = CallKey(secrets.token_hex(3000), "tu_1", "call_1")
    for key in (long_call, long_session):
        _claim(postgres, key)
        again = postgres.claim(
            key, function_name="f", arguments_hash="h", owner="other", lease_seconds=30
        )
        assert not again.won, "the second claim of the same long key loses"
        record = postgres.get(key)
        assert record is not None
        assert record.key == key
        postgres.save_result(key, {"type": "x", "output": "done"}, owner="me")
    assert [r.key for r in postgres.find(session_id=long_session.session_id)] == [long_session]
    # Keys that differ only in where one id ends and the next begins stay distinct.
    split_a, split_b = CallKey("a:1", "b", "c"), CallKey("a", "1:b", "c")
    _claim(postgres, split_a)
    assert postgres.claim(
        split_b, function_name="f", arguments_hash="h", owner="me", lease_seconds=30
    ).won


@pytest.mark.postgres
def test_an_existing_postgres_table_is_converted_on_open(
    postgres: PostgresResultStore,
) -> None:
    """A table made by an earlier release (primary key on the raw ids) is converted to
    digest uniqueness the next time a store opens it, keeping its rows."""
    import psycopg

    dsn = os.environ[POSTGRES_DSN_ENV]
    schema, table = postgres._schema, postgres._table_name
    _claim(postgres, KEY)
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'DROP INDEX "{schema}"."{table}_key_digest"')
        connection.execute(f'DROP INDEX "{schema}"."{table}_call_id_hash"')
        connection.execute(f'DROP INDEX "{schema}"."{table}_session_id_hash"')
        connection.execute(
            f'ALTER TABLE "{schema}"."{table}" ADD PRIMARY KEY (session_id, turn_id, call_id)'
        )
    reopened = PostgresResultStore(dsn, schema=schema, table=table)
    try:
        assert reopened.get(KEY) is not None
        long_key = CallKey("se_1", "tu_1", secrets.token_hex(4000))
        _claim(reopened, long_key)
        assert reopened.get(long_key) is not None
    finally:
        reopened.close()
