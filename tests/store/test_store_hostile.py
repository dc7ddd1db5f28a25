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
        with pytest.raises(StoreCorruptError, match="not valid JSON") as caught:
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
        # Random, so PostgreSQL cannot compress it under its 2,704-byte index limit.
        (CallKey("se_1", "tu_1", secrets.token_hex(4000)), "f"),
    ],
    ids=["nul-in-call-id", "nul-in-function-name", "8k-call-id"],
)
def test_postgres_refuses_unstorable_values_permanently(
    postgres: PostgresResultStore, key: CallKey, name: str
) -> None:
    """These raised a raw psycopg.DataError, or StoreUnavailableError (retried forever,
    logging the 8 KB id each time)."""
    with pytest.raises(StoreKeyError) as caught:
        _claim(postgres, key, name)
    assert isinstance(caught.value, StoreError)
    assert not isinstance(caught.value, StoreUnavailableError)
    assert len(str(caught.value)) < 600, "the message must not quote a huge id"
    # The store still works for ordinary calls afterwards.
    _claim(postgres, KEY)
    assert postgres.get(KEY) is not None
