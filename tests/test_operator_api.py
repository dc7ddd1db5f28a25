"""``resolve_call``: a person's decision on a call no runner can settle alone (issue 23),
against the emulator over loopback HTTP and real SQLite and PostgreSQL stores."""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openagentcore import (
    AsyncClient,
    Client,
    ConflictError,
    FunctionRunner,
    InvalidTransitionError,
    PostgresResultStore,
    Resolution,
    SQLiteResultStore,
    UnknownCallError,
    resolve_call,
)
from openagentcore.local import LocalCore
from openagentcore.store import CallKey, CallRecord, CallState, ResultStore
from openagentcore.types import FunctionCallAction, FunctionCallOutputItem

TOOL = {
    "type": "function",
    "name": "refund",
    "description": "Refund an order.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
}
#: Owners on another host: only their leases, or a runner's mark, say they are gone.
FIRST_OWNER = "far-host:1:first"
SECOND_OWNER = "far-host:2:second"


class Emulated:
    """A Session of the emulator waiting on one ``refund`` call, and a store to resolve
    it in."""

    def __init__(
        self, core: LocalCore, client: Client, store: ResultStore, session_id: str
    ) -> None:
        self.core = core
        self.client = client
        self.store = store
        action = _pending_call(client, session_id)
        self.key = CallKey(session_id, action.turn_id, action.call_id)

    def claim(self, owner: str = FIRST_OWNER) -> CallRecord:
        claim = self.store.claim(
            self.key, function_name="refund", arguments_hash="x", owner=owner, lease_seconds=600
        )
        assert claim.won
        return claim.record

    def lose(self) -> None:
        """The call's worker died while it ran the function: a runner marked it in doubt."""
        self.store.mark(self.key, CallState.IN_DOUBT)

    def output(self) -> FunctionCallOutputItem:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for item in self.client.sessions.items.list(self.key.session_id, order="asc"):
                if isinstance(item, FunctionCallOutputItem):
                    return item
            time.sleep(0.05)
        raise AssertionError("the result never reached the server")


def _open_store(kind: str, tmp_path: Path) -> Iterator[ResultStore]:
    if kind == "sqlite":
        with SQLiteResultStore(tmp_path / "calls.db") as sqlite:
            yield sqlite
        return
    dsn = os.environ.get("OPENAGENTCORE_TEST_POSTGRES_DSN")
    if not dsn:
        pytest.skip("set OPENAGENTCORE_TEST_POSTGRES_DSN to run the PostgreSQL tests")
    table = f"operator_{secrets.token_hex(5)}"
    with PostgresResultStore(dsn, table=table) as postgres:
        yield postgres
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'DROP TABLE IF EXISTS "public"."{table}"')
        connection.execute(f'DROP TABLE IF EXISTS "public"."{table}_migrations"')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Emulated]:
    stores = _open_store(request.param, tmp_path)
    store = next(stores)
    core = LocalCore(keepalive_interval=0.5).start()
    client = Client(base_url=core.base_url, api_key=core.api_key)
    try:
        session = client.sessions.create(agent={"model": "scripted", "tools": [TOOL]}, input="go")
        yield Emulated(core, client, store, session.id)
    finally:
        client.close()
        core.stop()
        next(stores, None)


def _pending_call(client: Client, session_id: str) -> FunctionCallAction:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for action in client.sessions.retrieve(session_id).required_actions:
            if isinstance(action, FunctionCallAction):
                return action
        time.sleep(0.02)
    raise AssertionError("the Session never asked for the function call")


def _refund_runner(world: Emulated) -> tuple[FunctionRunner, list[str]]:
    """A runner serving ``refund`` (not idempotent), and the log of its runs."""
    runs: list[str] = []
    runner = FunctionRunner(world.client, store=world.store)

    @runner.function(name="refund")
    def refund(order_id: str = "") -> str:
        """Refund an order."""
        runs.append(order_id)
        return "refunded again"

    return runner, runs


# -- a call in doubt ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("decision", "settled_by", "status", "shown"),
    [
        ({"output": "refunded by hand"}, "manual:output", "completed", "refunded by hand"),
        ({"failed": "refund status unknown"}, "manual:failed", "failed", "refund status unknown"),
    ],
    ids=["output", "failed"],
)
def test_a_result_by_hand_is_saved_and_the_next_recover_submits_it(
    world: Emulated, decision: dict[str, Any], settled_by: str, status: str, shown: str
) -> None:
    world.claim()
    world.lose()

    resolution = resolve_call(world.store, world.key, **decision)

    assert isinstance(resolution, Resolution)
    assert (resolution.action, resolution.settled_by) == ("saved", settled_by)
    assert resolution.record == world.store.get(world.key)
    assert resolution.record.state is CallState.COMPLETED
    assert resolution.record.result == resolution.answer
    runner, runs = _refund_runner(world)
    with runner:
        assert runner.recover(world.key.session_id).results_resubmitted == 1
    assert runs == []
    output = world.output()
    assert output.status == status
    assert shown in json.dumps(output.model_dump())


def test_a_rerun_by_hand_leaves_the_call_for_the_next_runner_to_run(world: Emulated) -> None:
    world.claim()
    world.lose()

    resolution = resolve_call(world.store, world.key, rerun=True)

    assert (resolution.action, resolution.settled_by, resolution.answer) == (
        "cleared_to_rerun",
        "manual:rerun",
        None,
    )
    assert resolution.record.state is CallState.IN_DOUBT
    runner, runs = _refund_runner(world)
    with runner:  # closes the store it was given
        assert runner.serve(world.key.session_id, timeout=30).calls_run == 1
        stored = world.store.get(world.key)
    assert len(runs) == 1
    assert world.output().status == "completed"
    assert stored is not None
    assert (stored.attempts, stored.settled_by) == (2, "manual:rerun")


def test_a_call_whose_owner_is_gone_is_in_doubt_without_a_runner_marking_it(
    tmp_path: Path,
) -> None:
    """A started call whose lease ran out is in doubt: a person may settle it before any
    runner looks at it (by the store's clock, here one that jumps past the lease)."""
    now = [1_000.0]
    key = CallKey("sess_1", "turn_1", "call_1")
    with SQLiteResultStore(tmp_path / "calls.db", clock=lambda: now[0]) as store:
        store.claim(key, function_name="f", arguments_hash="x", owner=FIRST_OWNER, lease_seconds=5)
        with pytest.raises(InvalidTransitionError, match="not in doubt"):
            resolve_call(store, key, failed="too early")
        now[0] += 6

        resolution = resolve_call(store, key, failed="gone")

    assert resolution.record.state is CallState.COMPLETED
    assert resolution.record.in_doubt_at == now[0]


def test_a_call_still_running_or_with_a_result_is_refused_and_left_alone(
    world: Emulated,
) -> None:
    running = world.claim()
    with pytest.raises(InvalidTransitionError, match="only a call in doubt"):
        resolve_call(world.store, world.key, rerun=True)
    assert world.store.get(world.key) == running

    world.lose()
    resolve_call(world.store, world.key, output="first")
    with pytest.raises(InvalidTransitionError, match="with a saved result"):
        resolve_call(world.store, world.key, output="second")
    stored = world.store.get(world.key)
    assert stored is not None
    assert stored.result is not None
    assert stored.result["output"] == "first"


def test_an_unknown_call_is_named(world: Emulated) -> None:
    with pytest.raises(UnknownCallError, match=world.key.call_id):
        resolve_call(world.store, world.key, rerun=True)


@pytest.mark.parametrize(
    ("decision", "named"),
    [
        ({}, "exactly one of"),
        ({"output": "x", "rerun": True}, "exactly one of"),
        ({"output": "x", "failed": "y"}, "exactly one of"),
        ({"output": "nul \x00 inside"}, "output cannot be sent"),
        ({"failed": "nul \x00 inside"}, "failed cannot be sent"),
    ],
    ids=["none", "output-and-rerun", "output-and-failed", "bad-output", "bad-failed"],
)
def test_a_decision_that_cannot_be_sent_is_refused_before_the_store_changes(
    world: Emulated, decision: dict[str, Any], named: str
) -> None:
    world.claim()
    world.lose()
    before = world.store.get(world.key)

    with pytest.raises(ValueError, match=named):
        resolve_call(world.store, world.key, **decision)

    assert world.store.get(world.key) == before


def test_output_none_is_a_success_without_output(world: Emulated) -> None:
    world.claim()
    world.lose()

    resolution = resolve_call(world.store, world.key, output=None)

    assert resolution.answer is not None
    assert resolution.answer["success"] is True
    assert "output" not in resolution.answer


# -- a result the server refused -----------------------------------------------------------


def _refused(world: Emulated) -> dict[str, Any]:
    """A runner saved a result that the server refused (422): the call still waits."""
    world.claim()
    refused = {
        "type": "agent.session.input.tool_result",
        "turn_id": world.key.turn_id,
        "call_id": world.key.call_id,
        "success": True,
        "output": "a result the server refused",
    }
    world.store.save_result(world.key, refused, owner=FIRST_OWNER)
    world.store.mark(world.key, CallState.REJECTED)
    return refused


def test_a_refused_result_is_answered_on_the_server_and_the_record_keeps_it(
    world: Emulated,
) -> None:
    refused = _refused(world)

    resolution = resolve_call(
        world.store, world.key, failed="refund needs a person", client=world.client
    )

    assert (resolution.action, resolution.settled_by) == ("answered", "manual:failed")
    output = world.output()
    assert output.status == "failed"
    assert "refund needs a person" in json.dumps(output.model_dump())
    stored = world.store.get(world.key)
    assert stored == resolution.record
    assert stored.state is CallState.ABANDONED
    assert stored.result == refused  # the evidence of what the function returned


def test_a_refused_result_is_never_run_again_nor_answered_without_a_client(
    world: Emulated,
) -> None:
    _refused(world)
    before = world.store.get(world.key)

    with pytest.raises(InvalidTransitionError, match="running the function again"):
        resolve_call(world.store, world.key, rerun=True, client=world.client)
    with pytest.raises(InvalidTransitionError, match="pass client="):
        resolve_call(world.store, world.key, output="mine")

    assert world.store.get(world.key) == before


def test_an_answer_the_server_does_not_take_changes_nothing(world: Emulated) -> None:
    _refused(world)
    answer = {
        "type": "agent.session.input.tool_result",
        "turn_id": world.key.turn_id,
        "call_id": world.key.call_id,
        "success": True,
        "output": "answered first",
    }
    world.client.sessions.events.create(world.key.session_id, events=[answer])
    before = world.store.get(world.key)

    with pytest.raises(ConflictError):
        resolve_call(world.store, world.key, output="mine", client=world.client)

    assert world.store.get(world.key) == before


# -- the record keeps every decision --------------------------------------------------------


def _decisions(record: CallRecord) -> list[tuple[object, ...]]:
    return [
        (entry["settled_by"], entry["state"], entry["attempts"], entry["owner"])
        for entry in record.history
    ]


def test_a_rerun_by_hand_keeps_each_decision_and_who_ran_each_lost_attempt(
    world: Emulated,
) -> None:
    """Before, a record kept only the last word: the rerun cleared who ran the lost
    attempt, a rerun whose run was lost in turn went back in doubt with ``settled_by``
    cleared, and the next decision replaced it. Each decision is now kept, with the
    attempt it was about."""
    world.claim(FIRST_OWNER)
    world.lose()
    resolve_call(world.store, world.key, rerun=True)
    taken = world.store.take_over(
        world.key, owner=SECOND_OWNER, lease_seconds=600, expected_attempts=1
    )
    assert taken.won
    world.lose()  # the rerun's run was lost too

    final = resolve_call(world.store, world.key, failed="refund status unknown").record

    assert _decisions(final) == [
        ("manual:rerun", "in_doubt", 1, FIRST_OWNER),
        ("manual:failed", "in_doubt", 2, SECOND_OWNER),
    ]
    first, second = (entry["at"] for entry in final.history)
    assert isinstance(first, float)
    assert first <= second == final.updated_at
    assert world.store.get(world.key) == final


def test_a_rerun_by_hand_stays_in_the_history_when_the_lost_run_saves_after_all(
    world: Emulated,
) -> None:
    """The owner was slow, not gone: its result, saved after the rerun, is kept
    unlabelled (nobody settled it), and the history still shows the person's rerun."""
    world.claim(FIRST_OWNER)
    world.lose()
    resolve_call(world.store, world.key, rerun=True)
    late = {
        "type": "agent.session.input.tool_result",
        "turn_id": world.key.turn_id,
        "call_id": world.key.call_id,
        "success": True,
        "output": "first run",
    }

    saved = world.store.save_result(world.key, late, owner=FIRST_OWNER)

    assert (saved.state, saved.settled_by) == (CallState.COMPLETED, None)
    assert _decisions(saved) == [("manual:rerun", "in_doubt", 1, FIRST_OWNER)]


def test_an_answer_to_a_refused_result_is_kept_in_the_history(world: Emulated) -> None:
    _refused(world)

    answered = resolve_call(world.store, world.key, output="mine", client=world.client).record

    assert _decisions(answered) == [("manual:output", "rejected", 1, FIRST_OWNER)]


@pytest.mark.anyio
async def test_an_async_client_is_refused_before_the_record_says_answered(
    world: Emulated,
) -> None:
    """An AsyncClient's ``create`` returns a coroutine: nothing is sent until it is
    awaited, so the call must stay rejected, not be settled as answered."""
    _refused(world)
    before = world.store.get(world.key)
    async with AsyncClient(base_url=world.core.base_url, api_key=world.core.api_key) as client:
        with pytest.raises(TypeError, match="must be a Client"):
            resolve_call(world.store, world.key, output="mine", client=client)  # type: ignore[arg-type]

    assert world.store.get(world.key) == before
