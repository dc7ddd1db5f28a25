"""``--json`` output, parsed back: what scripts and dashboards read."""

from __future__ import annotations

import datetime
import json
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from openagentcore import Client, SQLiteResultStore
from openagentcore.cli import EXIT_STORE, main
from openagentcore.store import CallKey, PostgresResultStore, arguments_hash, new_owner_id
from openagentcore.types import FunctionCallAction

from ._support import save_result

Setup = tuple[Client, str, FunctionCallAction, Path]


def _json_of(argv: list[str], capsys: pytest.CaptureFixture[str], code: int = 0) -> object:
    assert main([*argv, "--json"]) == code
    return json.loads(capsys.readouterr().out)


def test_calls_list_and_show(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    _, session_id, action, store_path = setup
    before = time.time()
    save_result(store_path, session_id, action)

    listed = _json_of(["calls", "list", "--store", str(store_path)], capsys)
    assert isinstance(listed, list)
    assert len(listed) == 1
    record = listed[0]
    assert record["session_id"] == session_id
    assert record["call_id"] == action.call_id
    assert record["turn_id"] == action.turn_id
    assert record["function"] == "refund"
    assert record["state"] == "completed"
    assert record["result"]["output"] == "refunded"
    updated = datetime.datetime.fromisoformat(record["updated_at"].replace("Z", "+00:00"))
    assert updated.tzinfo is not None
    assert updated.timestamp() >= before - 1

    empty = _json_of(["calls", "list", "--store", str(store_path), "--state", "applied"], capsys)
    assert empty == []

    shown = _json_of(["calls", "show", action.call_id, "--store", str(store_path)], capsys)
    assert shown == listed


def test_pending(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    _, session_id, action, store_path = setup
    without_store = _json_of(["pending", session_id], capsys)
    assert without_store == {
        "session_id": session_id,
        "status": "requires_action",
        "store": False,
        "required_actions": [
            {
                "type": "function_call",
                "name": "refund",
                "turn_id": action.turn_id,
                "call_id": action.call_id,
                "saved_result": None,
                "state": None,
            }
        ],
    }
    save_result(store_path, session_id, action)
    with_store = _json_of(["pending", session_id, "--store", str(store_path)], capsys)
    assert isinstance(with_store, dict)
    assert with_store["store"] is True
    assert with_store["required_actions"][0]["saved_result"] is True
    assert with_store["required_actions"][0]["state"] == "completed"


def test_recover(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    _, session_id, action, store_path = setup
    save_result(store_path, session_id, action)
    report = _json_of(["recover", session_id, "--store", str(store_path)], capsys)
    assert isinstance(report, dict)
    assert report["session_id"] == session_id
    assert report["results_resubmitted"] == 1
    assert report["in_doubt"] == []
    assert report["conflicts"] == []
    assert report["store_errors"] == 0


def test_recover_lists_calls_in_doubt_as_objects(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    _, session_id, action, store_path = setup
    key = CallKey(session_id, action.turn_id, action.call_id)
    store = SQLiteResultStore(store_path)
    store.claim(
        key,
        function_name=action.name,
        arguments_hash=arguments_hash(action.arguments),
        owner="another-host:1:ab",
        lease_seconds=0.01,
    )
    store.close()
    time.sleep(0.05)  # the other host's lease expires without a saved result
    report = _json_of(["recover", session_id, "--store", str(store_path)], capsys, code=1)
    assert isinstance(report, dict)
    assert report["in_doubt"] == [
        {"session_id": session_id, "turn_id": action.turn_id, "call_id": action.call_id}
    ]


POSTGRES_DSN = os.environ.get("OPENAGENTCORE_TEST_POSTGRES_DSN")


@pytest.fixture
def postgres_table() -> Iterator[tuple[str, str, str]]:
    """``(dsn, schema, table)`` for a store in a schema of its own, dropped afterwards."""
    if not POSTGRES_DSN:
        pytest.skip("set OPENAGENTCORE_TEST_POSTGRES_DSN to run the PostgreSQL CLI tests")
    import psycopg

    schema = f"oac_cli_{secrets.token_hex(4)}"
    yield POSTGRES_DSN, schema, "bot_calls"
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.postgres
def test_postgres_store_with_schema_and_table(
    postgres_table: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg

    dsn, schema, table = postgres_table
    store = PostgresResultStore(dsn, schema=schema, table=table)
    key = CallKey("sess_pg", "turn_1", "call_pg")
    store.claim(
        key, function_name="refund", arguments_hash="h", owner=new_owner_id(), lease_seconds=30
    )
    store.close()

    where = ["--store", dsn, "--schema", schema, "--table", table]
    listed = _json_of(["calls", "list", *where], capsys)
    assert isinstance(listed, list)
    assert [(r["session_id"], r["call_id"], r["state"]) for r in listed] == [
        ("sess_pg", "call_pg", "started")
    ]

    # A typo in the table name is refused, and no table is created for it.
    assert main(["calls", "list", "--store", dsn, "--schema", schema, "--table", "bot_calz"]) == (
        EXIT_STORE
    )
    assert f"{schema}.bot_calz" in capsys.readouterr().err
    with psycopg.connect(dsn) as connection:
        row = connection.execute("SELECT to_regclass(%s)", (f'"{schema}"."bot_calz"',)).fetchone()
    assert row == (None,)
