"""How the runner settles calls in doubt: one a person cleared to run again (``calls
resolve --rerun``), and one its own function left without a result; against LocalCore
over loopback HTTP and real SQLite / PostgreSQL stores."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openagentcore import Client, FunctionRunner, PostgresResultStore, SQLiteResultStore
from openagentcore.local import LocalCore
from openagentcore.store import CallKey, CallRecord, CallState, Claim, StoreUnavailableError
from openagentcore.types import FunctionCallAction, FunctionCallOutputItem

TOOL = {
    "type": "function",
    "name": "refund",
    "description": "Refund an order.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
}


def _pending_call(client: Client, session_id: str) -> FunctionCallAction:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for action in client.sessions.retrieve(session_id).required_actions:
            if isinstance(action, FunctionCallAction):
                return action
        time.sleep(0.02)
    raise AssertionError("the Session never asked for the function call")


def _wait_output(client: Client, session_id: str, seconds: float = 10) -> FunctionCallOutputItem:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for item in client.sessions.items.list(session_id, order="asc"):
            if isinstance(item, FunctionCallOutputItem):
                return item
        time.sleep(0.05)
    raise AssertionError("the result never reached the server")


@pytest.fixture
def server() -> Iterator[tuple[Client, str, FunctionCallAction]]:
    core = LocalCore(keepalive_interval=0.2).start()
    client = Client(base_url=core.base_url, api_key=core.api_key)
    session = client.sessions.create(agent={"model": "scripted", "tools": [TOOL]}, input="go")
    action = _pending_call(client, session.id)
    yield client, session.id, action
    client.close()
    core.stop()


class _TakeOverCommitsThenBlips:
    """The first ``take_over`` commits, then the connection breaks before the answer
    arrives (``StoreUnavailableError``), as the store's own docs say may happen."""

    blips = 0

    def take_over(self, key: CallKey, **options: Any) -> Claim:
        claim: Claim = super().take_over(key, **options)  # type: ignore[misc]
        if type(self).blips == 0:
            type(self).blips += 1
            raise StoreUnavailableError("test: the connection broke after the commit")
        return claim


class _BlipSQLite(_TakeOverCommitsThenBlips, SQLiteResultStore):
    pass


class _BlipPostgres(_TakeOverCommitsThenBlips, PostgresResultStore):
    pass


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def blip_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        path = tmp_path / "calls.db"
        cls: Any = type("_S", (_BlipSQLite,), {"blips": 0})
        yield lambda plain=False: SQLiteResultStore(path) if plain else cls(path)
        return
    dsn = os.environ.get("OPENAGENTCORE_TEST_POSTGRES_DSN")
    if not dsn:
        pytest.skip("set OPENAGENTCORE_TEST_POSTGRES_DSN to run the PostgreSQL tests")
    table = f"audit_{secrets.token_hex(5)}"
    pcls: Any = type("_P", (_BlipPostgres,), {"blips": 0})
    yield (
        lambda plain=False: (
            PostgresResultStore(dsn, table=table) if plain else pcls(dsn, table=table)
        )
    )
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'DROP TABLE IF EXISTS "public"."{table}"')
        connection.execute(f'DROP TABLE IF EXISTS "public"."{table}_migrations"')


def test_a_rerun_by_hand_survives_a_take_over_whose_answer_was_lost(
    server: tuple[Client, str, FunctionCallAction], blip_store: Any
) -> None:
    """A person cleared a call in doubt to run again (``calls resolve --rerun``). The
    runner's take-over commits but its answer is lost (``StoreUnavailableError``), so
    the runner retries the same ``TakeOver``. The retry loses to the row its first try
    wrote (STARTED, owner = this runner, attempts + 1); ``_decide_existing`` takes that
    for "this process's own claim that nothing here runs", marks the call in doubt again
    (which wipes ``settled_by="manual:rerun"``) and answers it by the runner's in-doubt
    policy: the model gets "outcome unknown" and the function never runs, although a
    person decided it must run. (A plain ``claim`` has ``_unconfirmed`` for exactly this
    case; a take-over has nothing.)"""
    client, session_id, action = server
    key = CallKey(session_id, action.turn_id, action.call_id)
    plain = blip_store(True)
    try:
        assert plain.claim(
            key,
            function_name="refund",
            arguments_hash="x",
            owner="another-host:1:ab",
            lease_seconds=0.05,
        ).won
        time.sleep(0.2)
        cleared = plain.settle_by_hand(key, None, settled_by="manual:rerun")
        assert (cleared.state, cleared.settled_by) == (CallState.IN_DOUBT, "manual:rerun")
    finally:
        plain.close()

    runs: list[str] = []
    runner = FunctionRunner(client, store=blip_store())

    @runner.function(name="refund")
    def refund(order_id: str = "") -> str:
        """Refund an order (not idempotent)."""
        runs.append(order_id)
        return "refunded again"

    with runner:
        runner.serve(session_id, timeout=20)

    output = _wait_output(client, session_id)
    check = blip_store(True)
    try:
        stored = check.get(key)
    finally:
        check.close()
    assert isinstance(stored, CallRecord)
    assert (len(runs), output.status, stored.settled_by) == (1, "completed", "manual:rerun"), (
        f"runs={runs}, output status={output.status}, record settled_by={stored.settled_by}"
    )


def test_a_live_runners_own_call_that_ended_without_a_result_is_settled_by_its_policy(
    server: tuple[Client, str, FunctionCallAction], tmp_path: Path
) -> None:
    """Sync runner. Its function ended without a result (``SystemExit`` in the
    function's thread), so the runner marked the call in doubt and kept serving. It
    used to remember the call as done "in doubt" and leave it there: no policy answer,
    and a later ``calls resolve`` ignored while the runner lived, so the Turn waited
    until the worker restarted (the serve timed out). The in-doubt policy now settles
    it at once, as a restarted runner would: the model is told the outcome is unknown,
    and the function does not run again."""
    client, session_id, _ = server
    runs: list[str] = []
    runner = FunctionRunner(client, store=SQLiteResultStore(tmp_path / "calls.db"))

    @runner.function(name="refund")
    def refund(order_id: str = "") -> str:
        """Refund an order (not idempotent)."""
        runs.append(order_id)
        raise SystemExit("the function ended its worker")

    with runner:
        report = runner.serve(session_id, timeout=10)
    assert len(runs) == 1
    assert len(report.in_doubt) == 1
    output = _wait_output(client, session_id, 5)
    assert output.status == "failed"
