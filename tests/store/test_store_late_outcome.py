"""A function that finishes after its timeout: its late outcome is kept beside the
record, for the operator, and never changes the saved result (issue 12).

Run against memory, SQLite and PostgreSQL; the SQL stores keep it in the columns
migration 4 adds.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openagentcore.store import (
    CallKey,
    CallState,
    ResultStore,
    SQLiteResultStore,
    UnknownCallError,
)
from openagentcore.store._rules import encode_late_outcome
from openagentcore.store._sql import MIGRATIONS

from ._support import FakeClock, StoreSpec, applied_schema_versions

KEY = CallKey("sess_1", "turn_1", "call_1")
OWNER = "far:1:a"
TIMED_OUT = {
    "type": "agent.session.input.tool_result",
    "turn_id": "turn_1",
    "call_id": "call_1",
    "success": False,
    "error": "The call timed out after 0.3 s. Its outcome is unknown: it may have had its effect.",
}
LATE = {
    "type": "agent.session.input.tool_result",
    "turn_id": "turn_1",
    "call_id": "call_1",
    "success": True,
    "output": "exported late: naïve ☀",
}


def _timed_out(store: ResultStore) -> None:
    """A call whose function ran past its timeout: the failure is saved as the result."""
    store.claim(KEY, function_name="export", arguments_hash="h", owner=OWNER, lease_seconds=30)
    store.save_result(KEY, TIMED_OUT, owner=OWNER)


def _changed_fields(before: Any, after: Any) -> dict[str, object]:
    """The fields of ``after`` that differ from ``before``."""
    return {
        name: getattr(after, name)
        for name in before.__slots__
        if getattr(before, name) != getattr(after, name)
    }


@pytest.mark.parametrize("state", [CallState.COMPLETED, CallState.SUBMITTED, CallState.APPLIED])
def test_a_late_outcome_is_kept_and_changes_nothing_else(
    store: ResultStore, clock: FakeClock, state: CallState
) -> None:
    _timed_out(store)
    if state is not CallState.COMPLETED:
        store.mark(KEY, state)
    before = store.get(KEY)
    assert before is not None
    assert (before.late_outcome, before.late_at) == (None, None)
    clock.advance(5)

    kept = store.keep_late_outcome(KEY, LATE)

    after = store.get(KEY)
    assert after == kept
    assert after is not None
    assert after.late_outcome == LATE
    assert _changed_fields(before, after) == {
        "late_outcome": LATE,
        "late_at": after.late_at,
        "updated_at": after.updated_at,
    }
    assert after.late_at is not None
    assert after.late_at == after.updated_at >= before.updated_at
    assert (after.state, after.result) == (state, TIMED_OUT)
    assert store.find(states=[state]) == [after]


def test_the_late_outcome_is_taken_at_the_stores_clock(
    store: ResultStore, clock: FakeClock
) -> None:
    _timed_out(store)
    clock.advance(7)

    kept = store.keep_late_outcome(KEY, LATE)

    assert kept.late_at == clock.now


def test_a_late_outcome_before_the_timeout_result_is_saved_leaves_the_call_running(
    store: ResultStore,
) -> None:
    """The runner writes both at once: the late outcome may win the race."""
    store.claim(KEY, function_name="export", arguments_hash="h", owner=OWNER, lease_seconds=30)

    store.keep_late_outcome(KEY, LATE)

    running = store.get(KEY)
    assert running is not None
    assert (running.state, running.result, running.owner) == (CallState.STARTED, None, OWNER)
    assert running.lease_expires_at is not None
    assert store.renew_lease(KEY, owner=OWNER, lease_seconds=30)
    saved = store.save_result(KEY, TIMED_OUT, owner=OWNER)
    assert (saved.state, saved.result, saved.late_outcome) == (
        CallState.COMPLETED,
        TIMED_OUT,
        LATE,
    )


def test_the_first_late_outcome_is_kept(store: ResultStore, clock: FakeClock) -> None:
    _timed_out(store)
    first = store.keep_late_outcome(KEY, LATE)
    clock.advance(5)

    second = store.keep_late_outcome(KEY, {**LATE, "output": "another"})

    assert second == first
    assert store.get(KEY) == first


def test_keeping_a_late_outcome_of_an_unknown_call_raises(store: ResultStore) -> None:
    with pytest.raises(UnknownCallError, match="claim"):
        store.keep_late_outcome(KEY, LATE)


HOSTILE: list[Any] = [
    {**LATE, "output": float("nan")},
    {**LATE, "output": [float("inf"), -float("inf")]},
    {**LATE, "output": "lone \udc80 surrogate"},
    {**LATE, "error\ud800": "a lone surrogate in a key"},
    {**LATE, "output": "NUL \x00 inside"},
    {**LATE, "output": object()},
    {**LATE, 7: "a key that is not a string"},
    {**LATE, "output": 10**5000},  # longer than int-to-str converts by default
]


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    "outcome", [*HOSTILE, {**LATE, "output": _deep(100_000)}], ids=lambda _: "hostile"
)
def test_an_outcome_the_store_cannot_encode_is_kept_in_a_safe_form(
    store: ResultStore, outcome: dict[str, Any]
) -> None:
    _timed_out(store)

    kept = store.keep_late_outcome(KEY, outcome)

    stored = store.get(KEY)
    assert stored == kept
    assert stored is not None
    assert stored.late_outcome is not None
    # What the operator reads is strict JSON that any terminal prints.
    json.dumps(stored.late_outcome, allow_nan=False, ensure_ascii=False).encode("utf-8")
    assert stored.late_outcome["success"] is True
    assert stored.late_outcome["call_id"] == "call_1"
    assert stored.result == TIMED_OUT


def test_the_kept_outcome_survives_reopening(durable_spec: StoreSpec, clock: FakeClock) -> None:
    with durable_spec.open(clock) as first:
        _timed_out(first)
        kept = first.keep_late_outcome(KEY, LATE)

    with durable_spec.open(clock) as second:
        assert second.get(KEY) == kept


def test_keeping_a_late_outcome_never_rewrites_the_saved_result_text(tmp_path: Path) -> None:
    """The saved result is resubmitted byte for byte under its idempotency key."""
    path = tmp_path / "calls.db"
    with SQLiteResultStore(path) as store:
        _timed_out(store)
    before = _raw_result(path)

    with SQLiteResultStore(path) as store:
        store.keep_late_outcome(KEY, LATE)
        store.mark(KEY, CallState.SUBMITTED)

    assert _raw_result(path) == before


def _raw_result(path: Path) -> str:
    with closing(sqlite3.connect(path)) as connection:
        (row,) = connection.execute("SELECT result FROM openagentcore_calls").fetchall()
    text: str = row[0]
    return text


# -- the encoding is total --------------------------------------------------------------

_ANY_TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF))
_ANY_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _ANY_TEXT,
    lambda children: st.lists(children) | st.dictionaries(_ANY_TEXT, children),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(output=_ANY_VALUE)
def test_any_outcome_encodes_to_strict_json_that_keeps_what_json_can_hold(output: Any) -> None:
    outcome = {**LATE, "output": output}

    text = encode_late_outcome(outcome)

    text.encode("utf-8")  # no lone surrogates; NUL only escaped
    assert "\x00" not in text
    decoded = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} stored"))
    try:
        plain = json.dumps(outcome, ensure_ascii=False, allow_nan=False)
        plain.encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        return
    assert decoded == json.loads(plain)


# -- schema version 4 --------------------------------------------------------------------


def test_a_version_3_sqlite_file_gains_the_columns_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "calls.db"
    with SQLiteResultStore(path) as store:
        _timed_out(store)
    # Back to version 3, as an older openagentcore left it.
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("ALTER TABLE openagentcore_calls DROP COLUMN late_outcome")
        connection.execute("ALTER TABLE openagentcore_calls DROP COLUMN late_at")
        connection.execute("ALTER TABLE openagentcore_calls DROP COLUMN history")
        connection.execute("PRAGMA user_version = 3")

    with SQLiteResultStore(path) as store:
        old = store.get(KEY)
        assert old is not None
        assert (old.result, old.late_outcome, old.late_at) == (TIMED_OUT, None, None)
        store.keep_late_outcome(KEY, LATE)
        kept = store.get(KEY)
        assert kept is not None
        assert (kept.result, kept.late_outcome) == (TIMED_OUT, LATE)
    assert applied_schema_versions(StoreSpec("sqlite", str(path))) == [MIGRATIONS[-1].version]


@pytest.mark.postgres
def test_a_version_3_postgres_table_gains_the_columns_and_keeps_its_rows(
    postgres_schema: tuple[str, str], fresh_table: str
) -> None:
    import psycopg

    dsn, schema = postgres_schema
    spec = StoreSpec("postgres", dsn, schema=schema, table=fresh_table)
    with spec.open() as store:
        _timed_out(store)
    table = f'"{schema}"."{fresh_table}"'
    with psycopg.connect(dsn) as connection:
        connection.execute(f"ALTER TABLE {table} DROP COLUMN late_outcome")
        connection.execute(f"ALTER TABLE {table} DROP COLUMN late_at")
        connection.execute(f"ALTER TABLE {table} DROP COLUMN history")
        connection.execute(f'DELETE FROM "{schema}"."{fresh_table}_migrations" WHERE version >= 4')

    with spec.open() as store:
        old = store.get(KEY)
        assert old is not None
        assert (old.result, old.late_outcome, old.late_at) == (TIMED_OUT, None, None)
        kept = store.keep_late_outcome(KEY, LATE)
        assert store.get(KEY) == kept
        assert (kept.result, kept.late_outcome) == (TIMED_OUT, LATE)
        assert kept.late_at is not None
    assert applied_schema_versions(spec) == [m.version for m in MIGRATIONS]
