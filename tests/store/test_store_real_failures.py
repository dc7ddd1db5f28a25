"""Real store failures: a file deleted under a running store, damaged rows, a
read-only PostgreSQL standby, a column changed under a running store.

Each test failed before its fix, because of the defect its docstring names.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

import pytest

from openagentcore.store import (
    CallKey,
    PostgresResultStore,
    SQLiteResultStore,
    StoreCorruptError,
    StoreError,
    StoreUnavailableError,
)

from ._support import StoreSpec

KEY = CallKey("se_1", "tu_1", "call_1")
OTHER = CallKey("se_1", "tu_1", "call_2")
OWNER = "host-a:1:token"
EVENT = {
    "type": "agent.session.input.tool_result",
    "call_id": KEY.call_id,
    "success": True,
    "output": "done",
}


def _claim(store: object, key: CallKey, owner: str = OWNER) -> bool:
    return store.claim(  # type: ignore[attr-defined, no-any-return]
        key, function_name="f", arguments_hash="h", owner=owner, lease_seconds=60
    ).won


def _set_result_text(spec: StoreSpec, text: str) -> None:
    """Write ``text`` as the saved result of every row, behind the store's back."""
    if spec.kind == "sqlite":
        with contextlib.closing(sqlite3.connect(spec.location)) as raw, raw:
            raw.execute("UPDATE openagentcore_calls SET result = ?", (text,))
        return
    import psycopg

    with psycopg.connect(spec.location, autocommit=True) as raw:
        raw.execute(f'UPDATE "{spec.schema}"."{spec.table}" SET result = %s', (text,))


# -- SQLite: the file is deleted or replaced under a running store -----------------------


def test_sqlite_store_does_not_keep_writing_to_a_file_that_was_deleted(
    tmp_path: Path,
) -> None:
    """Defect: after its database file is deleted while a runner runs (a cleanup job,
    an operator "starting afresh"), the SQLite store keeps committing claims and
    results "durably" into the unlinked inode. Every other process (and this runner after a
    restart) opens a different file that has no record of them, so a call this runner
    claimed and saved is claimed and run a second time: a double run from a store
    failure. The store should notice that its path no longer names the file it opened
    and refuse writes (StoreUnavailableError / StoreCorruptError)."""
    path = tmp_path / "calls.db"
    runner_a = SQLiteResultStore(path)
    try:
        assert _claim(runner_a, KEY)
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(f"{path}{suffix}")

        # The runner goes on: claims a new call and saves its result.
        try:
            won = _claim(runner_a, OTHER)
            runner_a.save_result(OTHER, {**EVENT, "call_id": OTHER.call_id}, owner=OWNER)
        except StoreError:
            return  # the store noticed: nothing was promised that is not on disk
        assert won

        # A second worker (or this one, restarted) opens the same path.
        with SQLiteResultStore(path) as runner_b:
            second = _claim(runner_b, OTHER, owner="host-a:2:token")
        assert not second, (
            "the file was deleted, yet the first store reported the claim and the saved "
            "result of call_2 as committed; a second runner now wins the same call and "
            "runs it again"
        )
    finally:
        runner_a.close()


# -- rows that are valid JSON but not a saved result ------------------------------------


@pytest.mark.parametrize("text", ["null", "[1, 2]", '"text"'], ids=["null", "list", "string"])
def test_a_saved_result_that_is_not_a_json_object_is_a_damaged_row(
    durable_spec: StoreSpec, store: SQLiteResultStore | PostgresResultStore, text: str
) -> None:
    """Defect: ``decode_result`` (_rules.py:202) accepts any JSON, so a damaged result
    column holding ``null`` reads back as a ``COMPLETED`` record *without* a result.
    The runner takes such a record for a live claim of another worker
    (``_decide_existing``, _core.py:929) and never answers or reports the call (see
    tests/runner/test_store_real_failures.py); a list or a string is posted to the
    server as if it were an event. A row like that is damaged and must read as
    ``StoreCorruptError``, as bad JSON already does on SQLite."""
    assert _claim(store, KEY)
    store.save_result(KEY, EVENT, owner=OWNER)
    _set_result_text(durable_spec, text)

    with pytest.raises(StoreCorruptError):
        store.get(KEY)
    with pytest.raises(StoreCorruptError):  # read with other keys, it fails them all
        store.get_many([OTHER, KEY])


# -- PostgreSQL ------------------------------------------------------------------------


@pytest.fixture
def pg_spec(postgres_schema: tuple[str, str], fresh_table: str) -> StoreSpec:
    dsn, schema = postgres_schema
    return StoreSpec("postgres", dsn, schema=schema, table=fresh_table)


@pytest.mark.postgres
def test_postgres_row_with_bad_json_is_store_corrupt_error(pg_spec: StoreSpec) -> None:
    """Defect: a row whose result is not valid JSON makes the PostgreSQL store raise a
    bare ``json.JSONDecodeError`` (a ValueError, not a StoreError) from get, find,
    claim and save_result: _postgres.py:283-303 maps only psycopg errors, while the
    SQLite store maps the same damage to ``StoreCorruptError`` (_sqlite.py:164, 273).
    Callers that handle the documented StoreError family (the CLI, applications)
    crash on it instead."""
    with PostgresResultStore(
        pg_spec.location, schema=pg_spec.schema, table=pg_spec.table, pool_size=1
    ) as store:
        assert _claim(store, KEY)
        store.save_result(KEY, EVENT, owner=OWNER)
        _set_result_text(pg_spec, "{not json")
        for name, operation in [
            ("get", lambda: store.get(KEY)),
            ("get_many", lambda: store.get_many([KEY, OTHER])),
            ("find", lambda: store.find(session_id=KEY.session_id)),
            ("claim", lambda: _claim(store, KEY, owner="other:1:x")),
        ]:
            try:
                operation()
            except StoreCorruptError:
                continue
            except Exception as exc:
                pytest.fail(f"{name} raised {type(exc).__name__}, not StoreCorruptError: {exc}")
            pytest.fail(f"{name} read a damaged row without complaint")


@pytest.mark.postgres
def test_postgres_read_only_server_is_unavailable_not_a_permanent_refusal(
    pg_spec: StoreSpec,
) -> None:
    """Defect: a server that refuses writes because it is read-only (a standby during
    a failover, ``default_transaction_read_only``) makes the store raise psycopg's
    ``ReadOnlySqlTransaction`` (an InternalError, SQLSTATE 25006) unmapped
    (_postgres.py:289-292 maps only OperationalError). docs/fleet.md promises
    ``StoreUnavailableError`` while the database fails over; the runner instead treats
    the raw error as a permanent refusal and answers every new call with "This call
    cannot be recorded by the runner." without running it (_core.py:1341)."""
    PostgresResultStore(
        pg_spec.location, schema=pg_spec.schema, table=pg_spec.table, pool_size=1
    ).close()
    sep = "&" if "?" in pg_spec.location else "?"
    standby_dsn = f"{pg_spec.location}{sep}options=-c%20default_transaction_read_only%3Don"
    with (
        PostgresResultStore(
            standby_dsn, schema=pg_spec.schema, table=pg_spec.table, pool_size=1
        ) as store,
        pytest.raises(StoreUnavailableError),
    ):
        _claim(store, KEY)


@pytest.mark.postgres
def test_postgres_store_survives_a_column_type_change_under_it(pg_spec: StoreSpec) -> None:
    """Defect: after ``ALTER TABLE ... ALTER COLUMN attempts TYPE bigint`` (a harmless
    widening done while runners run), every read on a pooled connection that had
    prepared the store's SELECT fails with psycopg's ``FeatureNotSupported: cached plan
    must not change result type``, unmapped (not a StoreError), and keeps failing on
    that connection for ever; the first claim after it fails the same way. The runner
    takes it as a permanent refusal and answers the call with a failure instead of
    retrying. The store should drop the stale prepared statements (or not prepare
    server-side) and report StoreUnavailableError at most once."""
    import psycopg

    with PostgresResultStore(
        pg_spec.location, schema=pg_spec.schema, table=pg_spec.table, pool_size=1
    ) as store:
        assert _claim(store, KEY)
        for _ in range(8):  # psycopg prepares a statement after 5 runs
            assert store.get(KEY) is not None
        with psycopg.connect(pg_spec.location, autocommit=True) as admin:
            admin.execute(
                f'ALTER TABLE "{pg_spec.schema}"."{pg_spec.table}" '
                "ALTER COLUMN attempts TYPE bigint"
            )
        errors: list[str] = []
        record = None
        for _ in range(3):
            try:
                record = store.get(KEY)
                break
            except StoreUnavailableError:
                continue
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
        assert not errors, f"get raised errors outside the store's family: {errors}"
        assert record is not None
        assert record.attempts == 1
