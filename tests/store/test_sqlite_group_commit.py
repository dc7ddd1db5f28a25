"""SQLite group commit: changes made by threads at the same time share one transaction.

Each test holds the store's write lock while its threads queue their changes, so the
group is formed deterministically; the lock is the store's own, taken the way a
committing thread would hold it.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from openagentcore.store import (
    CallKey,
    CallState,
    SQLiteResultStore,
    StoreClosedError,
    StoreUnavailableError,
    UnknownCallError,
)
from openagentcore.store._sql import Transaction

OWNER = "owner-a"


def key(number: int) -> CallKey:
    return CallKey("sess_group", "turn_1", f"call_{number}")


def claim(store: SQLiteResultStore, number: int) -> Any:
    return store.claim(
        key(number), function_name="f", arguments_hash="h", owner=OWNER, lease_seconds=60
    )


def count_transactions(store: SQLiteResultStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts write transactions the store begins, from here on."""
    begun: list[int] = []
    real = store._transaction

    @contextmanager
    def counted() -> Iterator[Transaction]:
        begun.append(1)
        with real() as tx:
            yield tx

    monkeypatch.setattr(store, "_transaction", counted)
    return begun


def run_queued(store: SQLiteResultStore, calls: list[Callable[[], Any]]) -> list[Any]:
    """Starts one thread per call while holding the write lock, waits until every call
    has queued its change, then lets them commit; returns each call's result or error."""
    outcomes: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            outcomes[index] = calls[index]()
        except Exception as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    with store._lock:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while len(store._pending) < len(calls):
            assert time.monotonic() < deadline, "the threads never queued their changes"
            time.sleep(0.001)
    for thread in threads:
        thread.join(timeout=10)
    return outcomes


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteResultStore]:
    with SQLiteResultStore(tmp_path / "calls.db") as opened:
        yield opened


def test_changes_queued_together_commit_in_one_transaction(
    store: SQLiteResultStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    begun = count_transactions(store, monkeypatch)

    outcomes = run_queued(store, [functools.partial(claim, store, n) for n in range(12)])

    assert [outcome.won for outcome in outcomes] == [True] * 12
    assert len(begun) == 1
    assert {record.key for record in store.find()} == {key(n) for n in range(12)}


def test_one_change_failing_leaves_the_rest_of_its_group_committed(
    store: SQLiteResultStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim(store, 1)
    begun = count_transactions(store, monkeypatch)

    outcomes = run_queued(
        store,
        [
            lambda: claim(store, 0),
            lambda: store.save_result(key(1), {"output": "one"}, owner=OWNER),
            lambda: store.save_result(key(9), {"output": "never claimed"}, owner=OWNER),
            lambda: claim(store, 2),
        ],
    )

    assert len(begun) == 1
    assert outcomes[0].won
    assert outcomes[3].won
    assert outcomes[1].state is CallState.COMPLETED
    assert isinstance(outcomes[2], UnknownCallError)
    saved = store.get(key(1))
    assert saved is not None
    assert saved.result == {"output": "one"}
    assert store.get(key(9)) is None
    assert {record.key for record in store.find()} == {key(0), key(1), key(2)}


def test_a_failed_commit_fails_every_change_of_its_group_and_keeps_none(
    store: SQLiteResultStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = store._transaction

    @contextmanager
    def commit_fails() -> Iterator[Transaction]:
        with real() as tx:
            yield tx
            raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(store, "_transaction", commit_fails)

    outcomes = run_queued(store, [functools.partial(claim, store, n) for n in range(5)])

    assert all(isinstance(outcome, StoreUnavailableError) for outcome in outcomes)
    assert "disk I/O error" in str(outcomes[0])
    monkeypatch.undo()
    assert store.find() == []
    assert claim(store, 0).won  # the store works again once the disk does


def test_a_group_of_progress_marks_alone_does_not_wait_for_the_disk(
    store: SQLiteResultStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(3):
        claim(store, n)
        store.save_result(key(n), {"output": n}, owner=OWNER)
    levels: list[str] = []
    real = store._set_synchronous

    def recorded(level: str) -> None:
        levels.append(level)
        real(level)

    monkeypatch.setattr(store, "_set_synchronous", recorded)

    run_queued(
        store, [functools.partial(store.mark, key(n), CallState.SUBMITTED) for n in range(3)]
    )
    run_queued(
        store,
        [
            lambda: store.mark(key(0), CallState.APPLIED),
            lambda: claim(store, 3),
        ],
    )

    assert levels == ["NORMAL", "FULL"]
    connection = store._connection
    assert connection is not None
    assert connection.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL again
    assert [store.get(key(n)).state for n in range(3)] == [  # type: ignore[union-attr]
        CallState.APPLIED,
        CallState.SUBMITTED,
        CallState.SUBMITTED,
    ]


def test_a_closed_store_fails_queued_changes_with_what_to_do(
    store: SQLiteResultStore,
) -> None:
    store.close()
    with pytest.raises(StoreClosedError, match="open the store again"):
        claim(store, 0)
