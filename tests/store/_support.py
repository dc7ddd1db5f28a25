"""Helpers shared by the store tests, importable by spawned worker processes."""

from __future__ import annotations

import contextlib
import multiprocessing.synchronize
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from openagentcore.store import (
    CallKey,
    MemoryResultStore,
    PostgresResultStore,
    SQLiteResultStore,
)
from openagentcore.store._records import process_host

POSTGRES_DSN_ENV = "OPENAGENTCORE_TEST_POSTGRES_DSN"


@dataclass
class FakeClock:
    """A clock the tests move by hand, so leases expire without sleeping."""

    now: float = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass(frozen=True)
class StoreSpec:
    """Enough to open the same storage again, in this process or another one."""

    kind: str  # "memory", "sqlite" or "postgres"
    location: str = ""  # SQLite path or PostgreSQL DSN
    schema: str = "public"
    table: str = "openagentcore_calls"

    def open(
        self, clock: FakeClock | None = None
    ) -> MemoryResultStore | SQLiteResultStore | PostgresResultStore:
        kwargs: dict[str, Any] = {} if clock is None else {"clock": clock}
        if self.kind == "memory":
            return MemoryResultStore(**kwargs)
        if self.kind == "sqlite":
            return SQLiteResultStore(self.location, **kwargs)
        return PostgresResultStore(
            self.location, schema=self.schema, table=self.table, pool_size=2, **kwargs
        )


def applied_schema_versions(spec: StoreSpec) -> list[int]:
    """The schema versions the store recorded, read straight from the database."""
    if spec.kind == "sqlite":
        with contextlib.closing(sqlite3.connect(spec.location)) as connection:
            return [connection.execute("PRAGMA user_version").fetchone()[0]]
    import psycopg

    with psycopg.connect(spec.location) as connection:
        rows = connection.execute(
            f'SELECT version FROM "{spec.schema}"."{spec.table}_migrations" ORDER BY version'
        ).fetchall()
    return [row[0] for row in rows]


def dead_owner() -> str:
    """An owner id for this host whose process has exited (and been reaped)."""
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(child.stdout)
    return f"{process_host()}:{pid}:deadbeef"


def keys(count: int, session: str = "sess_race") -> list[CallKey]:
    return [CallKey(session, "turn_1", f"call_{i}") for i in range(count)]


def claim_race_worker(
    spec: StoreSpec,
    owner: str,
    key_count: int,
    barrier: multiprocessing.synchronize.Barrier,
    results: Any,
) -> None:
    """Open the store, wait for every racer, claim each key; report the keys won."""
    store = spec.open()
    try:
        barrier.wait(timeout=60)
        won = [
            key.call_id
            for key in keys(key_count)
            if store.claim(
                key, function_name="f", arguments_hash="h", owner=owner, lease_seconds=60
            ).won
        ]
        results.put((owner, os.getpid(), won))
    finally:
        store.close()
