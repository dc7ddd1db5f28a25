"""Schema upgrades and what the PostgreSQL store decides on the server (issue 11)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest

from openagentcore import resolve_call
from openagentcore.store import (
    CallKey,
    CallState,
    PostgresResultStore,
    SQLiteResultStore,
    StoreUnavailableError,
)
from openagentcore.store._sql import MIGRATIONS

from ._support import StoreSpec, applied_schema_versions

KEY = CallKey("sess_1", "turn_1", "call_1")
EVENT = {"type": "agent.session.input.tool_result", "call_id": "call_1", "output": "ok"}

# The table as schema version 1 created it, spelled out: the upgrade must keep its rows.
V1_TABLE = """CREATE TABLE {table} (
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    function_name TEXT NOT NULL,
    arguments_hash TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('started', 'completed', 'submitted', 'applied',
        'in_doubt', 'abandoned')),
    result TEXT,
    idempotency_key TEXT NOT NULL,
    attempts INTEGER NOT NULL CHECK (attempts >= 1),
    owner TEXT,
    lease_expires_at DOUBLE PRECISION,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (session_id, turn_id, call_id)
)"""
V1_INDEX = "CREATE INDEX {prefix}state_updated_idx ON {table} (state, updated_at)"
V1_ROWS = [
    ("sess_1", "turn_1", "call_1", "f", "h1", "submitted", json.dumps(EVENT), "oac-1", 1,
     "far:1:a", None, 100.0, 101.0),
    ("sess_1", "turn_1", "call_2", "g", "h2", "started", None, "oac-2", 2, "far:2:b", 1e12,
     102.0, 103.0),
]  # fmt: skip
INSERT = "INSERT INTO {table} VALUES ({markers})"


def _check_upgraded(store: SQLiteResultStore | PostgresResultStore) -> None:
    records = store.find()
    assert [(r.key.call_id, r.state, r.attempts, r.owner) for r in records] == [
        ("call_1", CallState.SUBMITTED, 1, "far:1:a"),
        ("call_2", CallState.STARTED, 2, "far:2:b"),
    ]
    assert records[0].result == EVENT
    assert records[1].lease_expires_at == 1e12

    store.mark(KEY, CallState.REJECTED)  # the old CHECK constraint refused this state

    record = store.get(KEY)
    assert record is not None
    assert record.state is CallState.REJECTED
    assert store.find(states=[CallState.REJECTED]) == [record]


def test_sqlite_upgrades_a_version_1_file_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "calls.db"
    table = "openagentcore_calls"
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute(V1_TABLE.format(table=table))
        connection.execute(V1_INDEX.format(table=table, prefix=f"{table}_"))
        connection.executemany(INSERT.format(table=table, markers=", ".join("?" * 13)), V1_ROWS)
        connection.execute("PRAGMA user_version = 1")

    with SQLiteResultStore(path) as store:
        _check_upgraded(store)

    with closing(sqlite3.connect(path)) as connection:
        assert connection.execute("PRAGMA user_version").fetchone() == (MIGRATIONS[-1].version,)
        indexes = connection.execute(f"PRAGMA index_list({table})").fetchall()
        assert f"{table}_state_updated_idx" in {row[1] for row in indexes}
        tables = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        assert {row[0] for row in tables} == {table}


@pytest.mark.postgres
def test_postgres_upgrades_a_version_1_table_and_keeps_its_rows(
    postgres_schema: tuple[str, str], fresh_table: str
) -> None:
    import psycopg

    dsn, schema = postgres_schema
    table = f'"{schema}"."{fresh_table}"'
    migrations = f'"{schema}"."{fresh_table}_migrations"'
    with psycopg.connect(dsn) as connection:
        connection.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        connection.execute(V1_TABLE.format(table=table))
        connection.execute(V1_INDEX.format(table=table, prefix=f"{fresh_table}_"))
        with connection.cursor() as cursor:
            cursor.executemany(INSERT.format(table=table, markers=", ".join(["%s"] * 13)), V1_ROWS)
        connection.execute(
            f"CREATE TABLE {migrations} (version INTEGER PRIMARY KEY, "
            "description TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        connection.execute(f"INSERT INTO {migrations} (version, description) VALUES (1, 'v1')")

    with PostgresResultStore(dsn, schema=schema, table=fresh_table) as store:
        _check_upgraded(store)

    with psycopg.connect(dsn) as connection:
        versions = connection.execute(f"SELECT version FROM {migrations} ORDER BY 1").fetchall()
        assert versions == [(m.version,) for m in MIGRATIONS]
        with pytest.raises(psycopg.errors.CheckViolation):
            connection.execute(f"UPDATE {table} SET state = 'bogus'")


# -- PostgreSQL decides time and waits on the server -----------------------------------

# A worker whose host clock runs 90 s fast: time.time is skewed before the store is
# imported, as on a host whose clock is wrong.
_FAST_WORKER = """
import json, sys, time
real_time = time.time
time.time = lambda: real_time() + 90
from openagentcore.store import CallKey, PostgresResultStore
dsn, schema, table = sys.argv[1:4]
key = CallKey("sess_1", "turn_1", "call_1")
with PostgresResultStore(dsn, schema=schema, table=table) as store:
    record = store.get(key)
    lost = store.claim(key, function_name="f", arguments_hash="h", owner="far:2:b",
                       lease_seconds=30)
    print(json.dumps({
        "is_stale": store.is_stale(record),
        "claim_stale": getattr(lost, "stale", None),
        "took_over": store.take_over(key, owner="far:2:b", lease_seconds=30,
                                     expected_attempts=1).won,
        "marked_in_doubt": getattr(store, "mark_in_doubt", lambda *a, **k: None)(
            key, owner="far:2:b", expected_attempts=1),
        "pruned": store.prune(older_than=60),
    }))
"""


@pytest.mark.postgres
def test_a_worker_with_a_fast_clock_does_not_take_a_live_lease(
    postgres_schema: tuple[str, str], fresh_table: str
) -> None:
    """Issue 11, defect 10: leases were judged by each worker's own clock, so a worker
    whose clock ran 90 s fast took a call another worker was still running."""
    dsn, schema = postgres_schema
    with PostgresResultStore(dsn, schema=schema, table=fresh_table) as store:
        won = store.claim(
            KEY, function_name="f", arguments_hash="h", owner="far:1:a", lease_seconds=60
        )
        assert won.won
        # Applied just now: not old enough for prune(older_than=60) to delete.
        done = CallKey("sess_1", "turn_1", "call_done")
        store.claim(done, function_name="f", arguments_hash="h", owner="far:1:a", lease_seconds=60)
        store.save_result(done, EVENT, owner=None)
        store.mark(done, CallState.APPLIED)

        fast = subprocess.run(
            [sys.executable, "-c", _FAST_WORKER, dsn, schema, fresh_table],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        assert fast.returncode == 0, fast.stderr
        verdict = json.loads(fast.stdout)

        assert verdict == {
            "is_stale": False,
            "claim_stale": False,
            "took_over": False,
            "marked_in_doubt": False,
            "pruned": 0,
        }
        record = store.get(KEY)
        assert record is not None
        assert (record.state, record.owner, record.attempts) == (CallState.STARTED, "far:1:a", 1)
        assert store.get(done) is not None


@pytest.mark.postgres
def test_postgres_times_come_from_the_database_clock(
    postgres_schema: tuple[str, str], fresh_table: str
) -> None:
    import psycopg

    dsn, schema = postgres_schema
    with psycopg.connect(dsn, autocommit=True) as connection:
        row = connection.execute("SELECT extract(epoch from clock_timestamp())::float8").fetchone()
        assert row is not None
        before = row[0]
    with PostgresResultStore(dsn, schema=schema, table=fresh_table) as store:
        record = store.claim(
            KEY, function_name="f", arguments_hash="h", owner="far:1:a", lease_seconds=60
        ).record
        assert before <= record.created_at == record.updated_at
        assert record.lease_expires_at == record.created_at + 60
        assert record.created_at <= time.time() + 5


@pytest.mark.postgres
def test_postgres_sessions_are_read_committed_with_timeouts(
    postgres_schema: tuple[str, str], fresh_table: str
) -> None:
    dsn, schema = postgres_schema
    with (
        PostgresResultStore(
            dsn, schema=schema, table=fresh_table, lock_timeout=0.25, statement_timeout=7
        ) as store,
        store._transaction() as tx,
    ):
        settings = tx.query(
            "SELECT current_setting('transaction_isolation'), "
            "current_setting('lock_timeout'), current_setting('statement_timeout')"
        )
    assert settings == [("read committed", "250ms", "7s")]


@pytest.mark.postgres
def test_a_stuck_row_lock_makes_renew_lease_fail_fast_instead_of_hanging(
    postgres_schema: tuple[str, str], fresh_table: str
) -> None:
    import psycopg

    dsn, schema = postgres_schema
    with PostgresResultStore(dsn, schema=schema, table=fresh_table, lock_timeout=0.5) as store:
        store.claim(KEY, function_name="f", arguments_hash="h", owner="far:1:a", lease_seconds=60)
        with psycopg.connect(dsn) as blocker:  # holds the row lock until it leaves
            blocker.execute(
                f'SELECT 1 FROM "{schema}"."{fresh_table}" WHERE call_id = %s FOR UPDATE',
                (KEY.call_id,),
            )
            outcome: list[BaseException | bool] = []

            def renew() -> None:
                try:
                    outcome.append(store.renew_lease(KEY, owner="far:1:a", lease_seconds=60))
                except BaseException as exc:
                    outcome.append(exc)

            started = time.monotonic()
            renewing = threading.Thread(target=renew)
            renewing.start()
            renewing.join(timeout=30)
            waited = time.monotonic() - started
            blocker.rollback()
        renewing.join()

        assert len(outcome) == 1
        assert isinstance(outcome[0], StoreUnavailableError), outcome
        assert "retry" in str(outcome[0])
        assert waited < 15  # lock_timeout is 0.5 s; generous for a loaded machine
        # The connection is usable again once the lock is gone.
        assert store.renew_lease(KEY, owner="far:1:a", lease_seconds=60)


@pytest.mark.parametrize("field", ["lock_timeout", "statement_timeout"])
def test_postgres_timeouts_are_checked_before_connecting(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        PostgresResultStore("postgresql://nobody@127.0.0.1:1/none", **{field: 0})  # type: ignore[arg-type]


# -- schema version 5: each decision by hand ------------------------------------------------


def _back_to_version_4(spec: StoreSpec) -> None:
    """The store as openagentcore 4 left it: no history column."""
    if spec.kind == "sqlite":
        with closing(sqlite3.connect(spec.location)) as connection, connection:
            connection.execute(f"ALTER TABLE {spec.table} DROP COLUMN history")
            connection.execute("PRAGMA user_version = 4")
        return
    import psycopg

    with psycopg.connect(spec.location) as connection:
        connection.execute(f'ALTER TABLE "{spec.schema}"."{spec.table}" DROP COLUMN history')
        connection.execute(
            f'DELETE FROM "{spec.schema}"."{spec.table}_migrations" WHERE version = 5'
        )


def test_a_version_4_store_gains_the_history_and_keeps_its_rows(durable_spec: StoreSpec) -> None:
    with durable_spec.open() as store:
        store.claim(KEY, function_name="f", arguments_hash="h", owner="far:1:a", lease_seconds=60)
        store.mark(KEY, CallState.IN_DOUBT)
    _back_to_version_4(durable_spec)

    with durable_spec.open() as store:
        old = store.get(KEY)
        assert old is not None
        assert (old.state, old.owner, old.history) == (CallState.IN_DOUBT, "far:1:a", ())
        resolve_call(store, KEY, rerun=True)
    with durable_spec.open() as store:
        kept = store.get(KEY)

    assert kept is not None
    assert [(entry["settled_by"], entry["owner"]) for entry in kept.history] == [
        ("manual:rerun", "far:1:a")
    ]
    versions = applied_schema_versions(durable_spec)
    assert versions[-1] == MIGRATIONS[-1].version == 5
