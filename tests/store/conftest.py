from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from openagentcore.store import ResultStore

from ._support import POSTGRES_DSN_ENV, FakeClock, StoreSpec


def _postgres_dsn() -> str:
    dsn = os.environ.get(POSTGRES_DSN_ENV)
    if not dsn:
        pytest.skip(
            f"set {POSTGRES_DSN_ENV} to a PostgreSQL DSN (e.g. "
            "postgresql://postgres@127.0.0.1:5432/test) to run the PostgreSQL store tests"
        )
    return dsn


@pytest.fixture(scope="session")
def postgres_schema() -> Iterator[tuple[str, str]]:
    """A schema private to this test run, dropped at the end: ``(dsn, schema)``."""
    dsn = _postgres_dsn()
    import psycopg

    schema = f"oac_test_{secrets.token_hex(4)}"
    yield dsn, schema
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def fresh_table() -> str:
    return f"calls_{secrets.token_hex(6)}"


@pytest.fixture(
    params=[
        "memory",
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def spec(request: pytest.FixtureRequest, tmp_path: Path, fresh_table: str) -> StoreSpec:
    """Where a store under test keeps its records; each test gets empty storage."""
    kind: str = request.param
    if kind == "sqlite":
        return StoreSpec("sqlite", str(tmp_path / "calls.db"))
    if kind == "postgres":
        dsn, schema = request.getfixturevalue("postgres_schema")
        return StoreSpec("postgres", dsn, schema=schema, table=fresh_table)
    return StoreSpec("memory")


@pytest.fixture
def durable_spec(spec: StoreSpec) -> StoreSpec:
    if spec.kind == "memory":
        pytest.skip("the memory store keeps nothing across processes or reopening")
    return spec


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(spec: StoreSpec, clock: FakeClock) -> Iterator[ResultStore]:
    opened = spec.open(clock)
    yield opened
    opened.close()
