"""A record keeps that its call was in doubt, and how it was settled (issue 15).

Run against memory, SQLite and PostgreSQL; the SQL stores keep it in the columns
migration 3 adds.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from openagentcore.store import (
    CallKey,
    CallState,
    InvalidTransitionError,
    ResultStore,
    SQLiteResultStore,
)
from openagentcore.store._sql import MIGRATIONS

from ._support import FakeClock, dead_owner

KEY = CallKey("sess_1", "turn_1", "call_1")
LEASE = 30.0
OK = {"type": "agent.session.input.tool_result", "call_id": "call_1", "success": True}
FAILED = {"type": "agent.session.input.tool_result", "call_id": "call_1", "success": False}


def _claim(store: ResultStore, owner: str = "far:1:a") -> None:
    store.claim(KEY, function_name="pay", arguments_hash="h", owner=owner, lease_seconds=LEASE)


def _in_doubt(store: ResultStore) -> None:
    _claim(store, owner=dead_owner())
    assert store.mark_in_doubt(KEY, owner="far:2:b", expected_attempts=1)


def test_a_call_that_never_was_in_doubt_says_so(store: ResultStore) -> None:
    _claim(store)
    store.save_result(KEY, OK, owner="far:1:a")

    record = store.get(KEY)
    assert record is not None
    assert (record.in_doubt_at, record.settled_by) == (None, None)


@pytest.mark.parametrize(("event", "settled_by"), [(FAILED, "failed"), (OK, "result")])
def test_a_policy_answer_is_kept_with_the_moment_it_was_in_doubt(
    store: ResultStore, event: dict[str, object], settled_by: str
) -> None:
    _in_doubt(store)
    doubted = store.get(KEY)
    assert doubted is not None
    assert doubted.in_doubt_at is not None
    assert doubted.settled_by is None

    store.save_result(KEY, event, owner=None)
    store.mark(KEY, CallState.SUBMITTED)
    store.mark(KEY, CallState.APPLIED)

    record = store.get(KEY)
    assert record is not None
    assert record.state is CallState.APPLIED
    assert record.in_doubt_at == doubted.in_doubt_at
    assert record.settled_by == settled_by
    assert store.find(states=[CallState.APPLIED]) == [record]


def test_a_run_that_saves_its_own_result_after_the_in_doubt_mark_is_no_policy_answer(
    store: ResultStore,
) -> None:
    """Another worker marked the call in doubt (its lease had lapsed), and before it
    decided, the run thought lost saved its result: that is the function's own result,
    not an ``on_in_doubt`` answer (``result``)."""
    _claim(store, owner="far:1:a")
    store.mark(KEY, CallState.IN_DOUBT)  # as a worker elsewhere judging the lease lapsed
    store.save_result(KEY, OK, owner="far:1:a")

    record = store.get(KEY)
    assert record is not None
    assert (record.state, record.result, record.settled_by) == (CallState.COMPLETED, OK, "finished")


def test_a_rerun_is_kept_through_the_new_attempts_result(store: ResultStore) -> None:
    _in_doubt(store)
    assert store.take_over(KEY, owner="far:2:b", lease_seconds=LEASE, expected_attempts=1).won
    store.save_result(KEY, FAILED, owner="far:2:b")

    record = store.get(KEY)
    assert record is not None
    assert (record.state, record.attempts, record.settled_by) == (CallState.COMPLETED, 2, "rerun")
    assert record.in_doubt_at is not None


def test_taking_over_a_stale_claim_is_a_rerun_of_a_call_in_doubt(
    store: ResultStore, clock: FakeClock
) -> None:
    _claim(store, owner="far:1:a")
    clock.advance(LEASE + 1)
    assert store.take_over(KEY, owner="far:2:b", lease_seconds=LEASE, expected_attempts=1).won

    record = store.get(KEY)
    assert record is not None
    assert record.settled_by == "rerun"
    assert record.in_doubt_at is not None


def test_settling_by_hand_saves_a_result_to_submit(store: ResultStore) -> None:
    _in_doubt(store)

    saved = store.settle_by_hand(KEY, OK, settled_by="manual:output")  # type: ignore[attr-defined]

    record = store.get(KEY)
    assert record == saved
    assert record is not None
    assert record.state is CallState.COMPLETED
    assert record.result == OK
    assert record.settled_by == "manual:output"
    assert record.in_doubt_at is not None


def test_a_stale_started_call_can_be_settled_by_hand(store: ResultStore) -> None:
    _claim(store, owner=dead_owner())

    store.settle_by_hand(KEY, FAILED, settled_by="manual:failed")  # type: ignore[attr-defined]

    record = store.get(KEY)
    assert record is not None
    assert (record.state, record.settled_by) == (CallState.COMPLETED, "manual:failed")


def test_a_rerun_by_hand_keeps_the_record_for_one_take_over(store: ResultStore) -> None:
    """``calls resolve --rerun`` keeps the call's history: the record stays, marked for a
    re-run, and the attempt count goes on (it was deleted before, losing both)."""
    _in_doubt(store)
    doubted = store.get(KEY)
    assert doubted is not None

    store.settle_by_hand(KEY, None, settled_by="manual:rerun")  # type: ignore[attr-defined]

    record = store.get(KEY)
    assert record is not None
    assert (record.state, record.attempts, record.settled_by, record.owner) == (
        CallState.IN_DOUBT,
        1,
        "manual:rerun",
        None,
    )
    assert record.in_doubt_at == doubted.in_doubt_at
    fresh = store.claim(
        KEY, function_name="pay", arguments_hash="h", owner="far:3:c", lease_seconds=LEASE
    )
    assert not fresh.won
    assert store.take_over(KEY, owner="far:3:c", lease_seconds=LEASE, expected_attempts=1).won
    late = store.take_over(KEY, owner="far:4:d", lease_seconds=LEASE, expected_attempts=1)
    assert not late.won
    store.save_result(KEY, OK, owner="far:3:c")
    store.mark(KEY, CallState.SUBMITTED)

    record = store.get(KEY)
    assert record is not None
    assert (record.state, record.attempts, record.settled_by) == (
        CallState.SUBMITTED,
        2,
        "manual:rerun",
    )
    assert record.in_doubt_at == doubted.in_doubt_at


def test_a_late_policy_answer_does_not_settle_a_rerun_another_worker_took_over(
    store: ResultStore,
) -> None:
    """A runner's in-doubt policy decided while the call was in doubt; meanwhile a
    person cleared it to run again and another worker took it over. The policy's
    answer, landing late, must not settle the run now going on (simulator seed 1741)."""
    _in_doubt(store)
    store.settle_by_hand(KEY, None, settled_by="manual:rerun")  # type: ignore[attr-defined]
    assert store.take_over(KEY, owner="far:3:c", lease_seconds=LEASE, expected_attempts=1).won

    store.save_result(KEY, FAILED, owner=None)

    record = store.get(KEY)
    assert record is not None
    assert (record.state, record.result, record.owner, record.attempts) == (
        CallState.STARTED,
        None,
        "far:3:c",
        2,
    )
    store.save_result(KEY, OK, owner="far:3:c")  # the rerun's own result still lands
    record = store.get(KEY)
    assert record is not None
    assert (record.state, record.result) == (CallState.COMPLETED, OK)


def test_a_rerun_by_hand_survives_a_claim_given_back_but_not_a_second_crash(
    store: ResultStore,
) -> None:
    """A runner that takes the call over and gives it back unrun (its serve ended first)
    leaves the person's decision standing; a rerun whose owner dies in turn is in doubt
    again and needs a new decision."""
    _in_doubt(store)
    store.settle_by_hand(KEY, None, settled_by="manual:rerun")  # type: ignore[attr-defined]
    assert store.take_over(KEY, owner="far:3:c", lease_seconds=LEASE, expected_attempts=1).won

    store.release(KEY, owner="far:3:c")

    record = store.get(KEY)
    assert record is not None
    assert (record.state, record.attempts, record.settled_by) == (
        CallState.IN_DOUBT,
        1,
        "manual:rerun",
    )
    dead = dead_owner()
    assert store.take_over(KEY, owner=dead, lease_seconds=LEASE, expected_attempts=1).won
    assert store.mark_in_doubt(KEY, owner="far:4:d", expected_attempts=2)
    record = store.get(KEY)
    assert record is not None
    assert (record.state, record.attempts, record.settled_by) == (CallState.IN_DOUBT, 2, None)


def test_only_calls_in_doubt_can_be_settled_by_hand(store: ResultStore) -> None:
    _claim(store, owner="far:1:a")  # alive and running
    with pytest.raises(InvalidTransitionError, match="not in doubt"):
        store.settle_by_hand(KEY, OK, settled_by="manual:output")  # type: ignore[attr-defined]
    store.save_result(KEY, OK, owner="far:1:a")
    with pytest.raises(InvalidTransitionError, match="saved result"):
        store.settle_by_hand(KEY, FAILED, settled_by="manual:failed")  # type: ignore[attr-defined]
    record = store.get(KEY)
    assert record is not None
    assert record.result == OK


def test_a_version_2_sqlite_file_gains_the_columns_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "calls.db"
    with SQLiteResultStore(path) as store:
        _claim(store)
    # Back to version 2, as an older openagentcore left it: without the columns of
    # versions 3 to 5.
    with closing(sqlite3.connect(path)) as connection, connection:
        for column in ("in_doubt_at", "settled_by", "late_outcome", "late_at", "history"):
            connection.execute(f"ALTER TABLE openagentcore_calls DROP COLUMN {column}")
        connection.execute("PRAGMA user_version = 2")

    with SQLiteResultStore(path) as store:
        record = store.get(KEY)
        assert record is not None
        assert (record.function_name, record.in_doubt_at, record.settled_by) == ("pay", None, None)
        assert store.mark_in_doubt(KEY, owner="far:1:a", expected_attempts=1)
        doubted = store.get(KEY)
        assert doubted is not None
        assert doubted.in_doubt_at is not None
    with closing(sqlite3.connect(path)) as connection:
        assert connection.execute("PRAGMA user_version").fetchone() == (MIGRATIONS[-1].version,)
