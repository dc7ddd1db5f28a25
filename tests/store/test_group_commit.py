"""Group commit on real SQLite and PostgreSQL: changes made while a commit is in progress
share the next transaction, each caller still gets its own outcome, and a lone change
never waits for company.

Each test holds one commit in progress (a claim of its own, stopped inside its
transaction) while its threads queue their changes, so the group is formed
deterministically: the threads are released once every change is queued.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from openagentcore.store import (
    CallKey,
    CallState,
    PostgresResultStore,
    SQLiteResultStore,
    StoreClosedError,
    StoreKeyError,
    StoreUnavailableError,
    UnknownCallError,
)
from openagentcore.store._group import PendingWrite
from openagentcore.store._sql import Transaction

OWNER = "owner-a"
RIVAL = "owner-b"
WAIT = 30.0

Store = SQLiteResultStore | PostgresResultStore


def key(number: int) -> CallKey:
    return CallKey("sess_group", "turn_1", f"call_{number}")


def claim(store: Store, number: int, owner: str = OWNER) -> Any:
    return store.claim(
        key(number), function_name="f", arguments_hash="h", owner=owner, lease_seconds=60
    )


@dataclass
class Batches:
    """The size of every commit the store ran, in order."""

    sizes: list[int] = field(default_factory=list)


def record_batches(store: Store, monkeypatch: pytest.MonkeyPatch) -> Batches:
    batches = Batches()
    real = store._group._commit

    def recorded(batch: list[PendingWrite[Any]]) -> None:
        batches.sizes.append(len(batch))
        real(batch)

    monkeypatch.setattr(store._group, "_commit", recorded)
    return batches


def run_gathered(
    store: Store, monkeypatch: pytest.MonkeyPatch, calls: list[Callable[[], Any]]
) -> list[Any]:
    """Holds a commit in progress while one thread per call queues its change, then lets
    them commit; returns each call's result or error."""
    entered, release, all_queued = threading.Event(), threading.Event(), threading.Event()
    real_commit = store._group._commit
    real_enqueue = store._group._enqueue
    queued: list[PendingWrite[Any]] = []

    def held(batch: list[PendingWrite[Any]]) -> None:
        if not entered.is_set():
            entered.set()
            assert release.wait(WAIT), "the test never released the held commit"
        real_commit(batch)

    def counted(pending: PendingWrite[Any]) -> None:
        real_enqueue(pending)
        queued.append(pending)
        if len(queued) == len(calls):
            all_queued.set()

    monkeypatch.setattr(store._group, "_commit", held)
    monkeypatch.setattr(store._group, "_enqueue", counted)
    outcomes: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            outcomes[index] = calls[index]()
        except Exception as exc:
            outcomes[index] = exc

    holder = threading.Thread(
        target=lambda: store.claim(
            CallKey("sess_holder", "turn_1", "call_0"),
            function_name="f",
            arguments_hash="h",
            owner=OWNER,
            lease_seconds=60,
        )
    )
    holder.start()
    assert entered.wait(WAIT), "the holding commit never started"
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    assert all_queued.wait(WAIT), "the threads never queued their changes"
    release.set()
    for thread in (holder, *threads):
        thread.join(WAIT)
    monkeypatch.setattr(store._group, "_commit", real_commit)
    monkeypatch.setattr(store._group, "_enqueue", real_enqueue)
    return outcomes


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """One commit at a time on either database (a pool of one PostgreSQL connection)."""
    opened: Store
    if kind == "sqlite":
        opened = SQLiteResultStore(tmp_path / "calls.db")
    else:
        dsn, schema = request.getfixturevalue("postgres_schema")
        opened = PostgresResultStore(
            dsn, schema=schema, table=request.getfixturevalue("fresh_table"), pool_size=1
        )
    with opened:
        yield opened


def user_keys(store: Store) -> set[CallKey]:
    return {record.key for record in store.find(session_id="sess_group")}


def test_changes_made_during_a_commit_share_the_next_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches = record_batches(store, monkeypatch)

    outcomes = run_gathered(
        store, monkeypatch, [functools.partial(claim, store, n) for n in range(12)]
    )

    assert [outcome.won for outcome in outcomes] == [True] * 12
    assert batches.sizes == [1, 12]
    assert user_keys(store) == {key(n) for n in range(12)}


def test_each_caller_of_a_shared_commit_learns_its_own_outcome(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim(store, 1)
    claim(store, 2)
    store.save_result(key(2), {"output": "first"}, owner=OWNER)
    batches = record_batches(store, monkeypatch)

    outcomes = run_gathered(
        store,
        monkeypatch,
        [
            lambda: claim(store, 0),  # won
            lambda: claim(store, 0, owner=RIVAL),  # lost to the claim just before it
            lambda: claim(store, 1, owner=RIVAL),  # lost: claimed before the group
            lambda: store.save_result(key(1), {"output": "one"}, owner=OWNER),  # saved
            lambda: store.save_result(key(2), {"output": "second"}, owner=OWNER),  # refused
            lambda: store.save_result(key(9), {"output": "never claimed"}, owner=OWNER),
            lambda: store.renew_lease(key(2), owner=OWNER, lease_seconds=60),  # completed
            lambda: claim(store, 3),
        ],
    )

    assert batches.sizes[-1] == 8
    won, lost, lost_before, saved, refused, unknown, renewed, other = outcomes
    assert won.won
    assert won.record.owner == OWNER
    assert not lost.won
    assert lost.record.owner == OWNER
    assert not lost_before.won
    assert lost_before.record.owner == OWNER
    assert saved.state is CallState.COMPLETED
    assert saved.result == {"output": "one"}
    assert refused.result == {"output": "first"}
    assert isinstance(unknown, UnknownCallError)
    assert renewed is False
    assert other.won
    assert store.get(key(9)) is None
    assert user_keys(store) == {key(0), key(1), key(2), key(3)}
    second = store.get(key(2))
    assert second is not None
    assert second.result == {"output": "first"}


@contextmanager
def _failing_commit(store: Store, error: Exception) -> Iterator[Transaction]:
    """The store's own transaction, failing as it commits."""
    with type(store)._transaction(store) as tx:
        yield tx
        raise error


def test_a_failed_shared_commit_fails_every_change_and_keeps_none(
    store: Store, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    error: Exception
    if kind == "sqlite":
        error = sqlite3.OperationalError("disk I/O error")
    else:
        import psycopg

        error = psycopg.OperationalError("server closed the connection unexpectedly")
    real_commit = store._group._commit

    def shared_commits_fail(batch: list[PendingWrite[Any]]) -> None:
        if len(batch) == 1:
            real_commit(batch)
            return
        store._transaction = functools.partial(_failing_commit, store, error)  # type: ignore[method-assign]
        try:
            real_commit(batch)
        finally:
            del store._transaction

    monkeypatch.setattr(store._group, "_commit", shared_commits_fail)

    outcomes = run_gathered(
        store, monkeypatch, [functools.partial(claim, store, n) for n in range(5)]
    )

    assert all(isinstance(outcome, StoreUnavailableError) for outcome in outcomes), outcomes
    assert "closed the connection" in str(outcomes[0]) or "disk I/O error" in str(outcomes[0])
    assert user_keys(store) == set()
    monkeypatch.undo()
    assert claim(store, 0).won  # the store works again once the database does


def test_no_caller_of_a_shared_commit_returns_before_its_commit(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller told it won before the COMMIT could run its function on a claim that a
    crash then undoes: every caller must still be asleep when the COMMIT is sent."""
    real_commit = store._group._commit
    seen: list[tuple[bool, bool]] = []

    @contextmanager
    def inspecting(batch: list[PendingWrite[Any]]) -> Iterator[Transaction]:
        with type(store)._transaction(store) as tx:
            yield tx
            # The statements ran; the COMMIT comes when this block ends.
            seen.extend((p.done, p.wake is not None and p.wake.locked()) for p in batch[1:])

    def shared_inspected(batch: list[PendingWrite[Any]]) -> None:
        if len(batch) == 1:
            real_commit(batch)
            return
        store._transaction = functools.partial(inspecting, batch)  # type: ignore[method-assign]
        try:
            real_commit(batch)
        finally:
            del store._transaction

    monkeypatch.setattr(store._group, "_commit", shared_inspected)

    outcomes = run_gathered(
        store, monkeypatch, [functools.partial(claim, store, n) for n in range(4)]
    )

    assert [outcome.won for outcome in outcomes] == [True] * 4
    assert seen == [(False, True)] * 3  # the leader is the fourth: it runs the commit


def test_a_lone_change_commits_at_once(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    batches = record_batches(store, monkeypatch)
    queued: list[PendingWrite[Any]] = []
    monkeypatch.setattr(store._group, "_enqueue", queued.append)  # a queued change would hang

    assert claim(store, 0).won
    saved = store.save_result(key(0), {"output": "alone"}, owner=OWNER)

    assert saved.state is CallState.COMPLETED
    assert queued == []
    assert batches.sizes == [1, 1]
    assert (store._group.commits, store._group.changes) == (2, 2)


def test_one_failing_change_leaves_the_rest_of_its_group_committed(
    store: Store, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim(store, 1)
    batches = record_batches(store, monkeypatch)
    bad = CallKey("sess_group", "turn_1", "call_\x00nul")  # PostgreSQL refuses NUL in text

    outcomes = run_gathered(
        store,
        monkeypatch,
        [
            lambda: claim(store, 0),
            lambda: store.claim(
                bad, function_name="f", arguments_hash="h", owner=OWNER, lease_seconds=60
            ),
            lambda: store.mark(key(1), CallState.SUBMITTED),  # no result saved: refused
            lambda: store.save_result(key(1), {"output": "one"}, owner=OWNER),
            lambda: claim(store, 2),
        ],
    )

    assert batches.sizes[-1] == 5
    first, nul, marked, saved, last = outcomes
    assert first.won
    assert last.won
    assert "no saved result" in str(marked)
    assert saved.result == {"output": "one"}
    if kind == "postgres":
        assert isinstance(nul, StoreKeyError)
        assert user_keys(store) == {key(0), key(1), key(2)}
    else:  # SQLite stores NUL as it is
        assert nul.won
        assert user_keys(store) == {key(0), key(1), key(2), bad}


def test_a_group_of_progress_marks_alone_does_not_wait_for_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SQLiteResultStore(tmp_path / "calls.db") as store:
        for n in range(3):
            claim(store, n)
            store.save_result(key(n), {"output": n}, owner=OWNER)
        levels: list[str] = []
        real = store._set_synchronous

        def recorded(level: str) -> None:
            levels.append(level)
            real(level)

        monkeypatch.setattr(store, "_set_synchronous", recorded)

        run_gathered(
            store,
            monkeypatch,
            [functools.partial(store.mark, key(n), CallState.SUBMITTED) for n in range(3)],
        )
        run_gathered(
            store,
            monkeypatch,
            [lambda: store.mark(key(0), CallState.APPLIED), lambda: claim(store, 3)],
        )

        # The holding commits are claims (synced); the marks' own group is not.
        assert levels == ["FULL", "NORMAL", "FULL", "FULL"]
        connection = store._connection
        assert connection is not None
        assert connection.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL again
        assert [store.get(key(n)).state for n in range(3)] == [  # type: ignore[union-attr]
            CallState.APPLIED,
            CallState.SUBMITTED,
            CallState.SUBMITTED,
        ]


def test_a_closed_store_fails_changes_with_what_to_do(store: Store) -> None:
    store.close()
    with pytest.raises(StoreClosedError, match="open the store again"):
        claim(store, 0)


@pytest.mark.postgres
def test_postgres_commits_as_many_at_once_as_it_has_connections(
    request: pytest.FixtureRequest, fresh_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change made while another commit holds one of two connections commits at once
    on the other, without queueing."""
    dsn, schema = request.getfixturevalue("postgres_schema")
    with PostgresResultStore(dsn, schema=schema, table=fresh_table, pool_size=2) as store:
        entered, release = threading.Event(), threading.Event()
        real_commit = store._group._commit

        def first_held(batch: list[PendingWrite[Any]]) -> None:
            if not entered.is_set():
                entered.set()
                assert release.wait(WAIT)
            real_commit(batch)

        monkeypatch.setattr(store._group, "_commit", first_held)
        queued: list[PendingWrite[Any]] = []
        monkeypatch.setattr(store._group, "_enqueue", queued.append)
        holder = threading.Thread(target=claim, args=(store, 0))
        holder.start()
        assert entered.wait(WAIT)
        try:
            assert claim(store, 1).won  # while the first commit is held
        finally:
            release.set()
            holder.join(WAIT)
        assert queued == []
        assert user_keys(store) == {key(0), key(1)}
