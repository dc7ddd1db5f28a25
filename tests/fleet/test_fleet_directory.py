"""The fleet's directories on real PostgreSQL and a real SQLite file: several
directories in one process, as several workers see them."""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from openagentcore.runner._fleet_directory import Directory, PostgresDirectory, SQLiteDirectory

POSTGRES_DSN_ENV = "OPENAGENTCORE_TEST_POSTGRES_DSN"
TTL = 0.5


@pytest.fixture(params=["sqlite", "postgres"])
def open_directory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], Directory]]:
    opened: list[Directory] = []
    if request.param == "sqlite":
        path = tmp_path / "fleet.db"

        def make() -> Directory:
            opened.append(SQLiteDirectory(path))
            return opened[-1]

        yield make
    else:
        dsn = os.environ.get(POSTGRES_DSN_ENV)
        if not dsn:
            pytest.skip(f"set {POSTGRES_DSN_ENV} to run against PostgreSQL")
        import psycopg

        schema = f"oac_fleet_{secrets.token_hex(4)}"

        def make() -> Directory:
            opened.append(PostgresDirectory(dsn, schema=schema))
            return opened[-1]

        yield make
        for directory in opened:
            directory.close()
        opened.clear()
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    for directory in opened:
        directory.close()


def tick(directory: Directory, worker: str, ttl: float = 60.0) -> dict[str, int]:
    """One round of a worker's loop; returns what it owns after it."""
    directory.heartbeat(worker)
    plan, held = directory.plan(worker, ttl=ttl, slack=1, max_sessions=None)
    directory.release(worker, plan.release)
    for session_id, _ in plan.release:
        held.pop(session_id)
    for taken in directory.acquire(worker, plan.acquire, ttl=ttl):
        held[taken.session_id] = taken.epoch
    return held


SESSIONS = [(f"sess_{n:02}", "agent_a") for n in range(10)]


def test_two_workers_split_the_adopted_sessions_without_overlap(
    open_directory: Callable[[], Directory],
) -> None:
    a, b = open_directory(), open_directory()
    a.adopt(SESSIONS)
    a.adopt(SESSIONS)  # idempotent
    first = tick(a, "a")
    assert len(first) == 10  # alone, it takes everything
    b.heartbeat("b")
    tick(a, "a")  # now it sees b: gives back down to its share
    held_b = tick(b, "b")
    held_a = tick(a, "a")
    assert len(held_a) == 5
    assert len(held_b) == 5
    assert not set(held_a) & set(held_b)
    status = a.status()
    owners = {owner for _, _, _, owner, _ in status.sessions}
    assert owners == {"a", "b"}


def test_a_worker_takes_no_more_than_it_asks_for_while_others_are_live(
    open_directory: Callable[[], Directory],
) -> None:
    """On PostgreSQL the LIMIT of the orphans' subquery did not bound the UPDATE (the
    plan ran it again, its live-worker filter reading the clock): asked for its share
    of 10 among 4 live workers, the first took all 40, and the others idled."""
    directory = open_directory()
    directory.adopt([(f"sess_{n:02}", "agent_a") for n in range(40)])
    for worker in "abcd":
        directory.heartbeat(worker)
    plan, _ = directory.plan("a", ttl=60.0, slack=1, max_sessions=None)
    assert plan.acquire == 10
    assert len(directory.acquire("a", plan.acquire, ttl=60.0)) == 10
    assert len(directory.acquire("b", 10, ttl=60.0)) == 10
    owners = [owner for _, _, _, owner, _ in directory.status().sessions]
    assert owners.count("a") == owners.count("b") == 10
    assert owners.count(None) == 20


def test_a_lapsed_worker_loses_its_sessions_and_is_fenced(
    open_directory: Callable[[], Directory],
) -> None:
    a, b = open_directory(), open_directory()
    a.adopt(SESSIONS[:4])
    held_a = tick(a, "a", ttl=TTL)
    assert len(held_a) == 4
    deadline = time.monotonic() + 30
    held_b: dict[str, int] = {}
    while len(held_b) < 4:  # a stops heartbeating: within the TTL b has them all
        assert time.monotonic() < deadline, "b never took the lapsed worker's Sessions"
        held_b = tick(b, "b", ttl=TTL)
    assert all(held_b[s] == held_a[s] + 1 for s in held_a)
    # a comes back: its writes at the old epochs change nothing.
    assert a.release("a", held_a.items()) == 0
    session_id = next(iter(held_a))
    assert not a.park("a", session_id, held_a[session_id])
    _, still = a.plan("a", ttl=TTL, slack=1, max_sessions=None)
    assert still == {}
    assert tick(b, "b", ttl=TTL) == held_b


def test_leave_hands_over_at_once_and_notifies(open_directory: Callable[[], Directory]) -> None:
    a, b = open_directory(), open_directory()
    a.adopt(SESSIONS[:3])
    assert len(tick(a, "a")) == 3
    b.heartbeat("b")
    heard = threading.Event()
    if isinstance(b, PostgresDirectory):
        b.wait(0.01)  # start listening before the event

        def listen() -> None:
            if b.wait(30):
                heard.set()

        listener = threading.Thread(target=listen)
        listener.start()
    assert a.leave("a") == 3
    assert len(tick(b, "b")) == 3  # no TTL to wait out: a said it left
    if isinstance(b, PostgresDirectory):
        listener.join()
        assert heard.is_set()


def test_a_joining_worker_wakes_the_others_to_give_back_their_excess() -> None:
    """Without it a busy worker holding every Session gave none back until its next
    round (up to 3 s of back-off), while the new worker idled."""
    dsn = os.environ.get(POSTGRES_DSN_ENV)
    if not dsn:
        pytest.skip(f"set {POSTGRES_DSN_ENV} to run against PostgreSQL")
    import psycopg

    schema = f"oac_fleet_{secrets.token_hex(4)}"
    a, b = PostgresDirectory(dsn, schema=schema), PostgresDirectory(dsn, schema=schema)
    try:
        a.adopt(SESSIONS)
        assert len(tick(a, "a")) == 10
        a.wait(0.01)  # listening before b joins
        b.heartbeat("b", joining=True)
        assert a.wait(5.0), "a heard nothing of b joining"
        b.heartbeat("b")  # later heartbeats say nothing
        assert not a.wait(0.2)
    finally:
        a.close()
        b.close()
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_a_parked_session_is_not_taken_until_adopted_again(
    open_directory: Callable[[], Directory],
) -> None:
    a = open_directory()
    a.adopt(SESSIONS[:2])
    held = tick(a, "a")
    parked = "sess_00"
    assert a.park("a", parked, held[parked])
    assert set(tick(a, "a")) == {"sess_01"}
    a.adopt([(parked, "agent_a")], wake=False)  # discovery does not wake it
    assert set(tick(a, "a")) == {"sess_01"}
    a.adopt([(parked, "agent_a")])
    assert set(tick(a, "a")) == {"sess_00", "sess_01"}


def test_an_operator_release_fences_the_owner(open_directory: Callable[[], Directory]) -> None:
    a = open_directory()
    a.adopt(SESSIONS[:1])
    held = tick(a, "a")
    assert a.release_session("sess_00")
    assert not a.park("a", "sess_00", held["sess_00"])
    again = tick(a, "a")
    assert again["sess_00"] > held["sess_00"]


def test_a_group_forms_for_the_settle_time_after_its_oldest_live_worker_joined(
    open_directory: Callable[[], Directory],
) -> None:
    """The formation is counted on the directory's clock from the first join among the
    live workers: a later joiner sees less of it left, and meanwhile takes the share
    it would have with three more workers; a worker that joins a formed group takes
    its whole share."""
    a, b = open_directory(), open_directory()
    a.adopt([(f"sess_{n:02}", "agent_a") for n in range(40)])
    a.heartbeat("a")
    first, _ = a.plan("a", ttl=60.0, slack=1, max_sessions=None, settle=60.0)
    assert 59.0 < first.forming_for <= 60.0
    assert first.acquire == 10  # 40 over 1 + 3
    assert len(a.acquire("a", first.acquire, ttl=60.0)) == 10
    b.heartbeat("b")
    later, _ = b.plan("b", ttl=60.0, slack=1, max_sessions=None, settle=60.0)
    assert 0 < later.forming_for <= first.forming_for
    assert later.acquire == 8  # 40 over 2 + 3
    b.heartbeat("b")  # a later heartbeat is no new join: the formation still counts
    again, _ = b.plan("b", ttl=60.0, slack=1, max_sessions=None, settle=60.0)
    assert again.forming_for <= later.forming_for
    # Once its oldest worker joined longer ago than the settle time (here: a's age
    # when it first planned), the group has formed: a third worker takes its whole
    # share at once.
    a.heartbeat("c")
    settled = 60.0 - first.forming_for
    formed, _ = a.plan("c", ttl=60.0, slack=1, max_sessions=None, settle=settled)
    assert formed.forming_for == 0.0
    assert formed.acquire == 14  # 40 over 3, rounded up; 30 orphans


def test_a_lapsed_workers_join_does_not_count_as_the_groups(
    open_directory: Callable[[], Directory],
) -> None:
    """A dead worker's old row does not make a new group look formed."""
    a, b = open_directory(), open_directory()
    a.adopt(SESSIONS)
    a.heartbeat("dead")
    deadline = time.monotonic() + 30
    b.heartbeat("b")
    while b.plan("b", ttl=TTL, slack=1, max_sessions=None)[0].share != 10:
        assert time.monotonic() < deadline, "the dead worker never lapsed"
        b.heartbeat("b")  # b stays live while "dead" lapses
    b.leave("b")
    b.heartbeat("new")
    plan, _ = b.plan("new", ttl=TTL, slack=1, max_sessions=None, settle=30.0)
    assert plan.forming_for > 29.0


def test_waking_adopt_does_not_lock_the_active_sessions_it_finds() -> None:
    """Every worker's first sweep re-adopts every Session that waits for a call, to
    wake the parked ones. That upsert locked each row it met until it committed, parked
    or not, and a worker taking its share meanwhile skipped them all (SKIP LOCKED): at
    a cold start the first worker took nothing and waited for its next round."""
    dsn = os.environ.get(POSTGRES_DSN_ENV)
    if not dsn:
        pytest.skip(f"set {POSTGRES_DSN_ENV} to run against PostgreSQL")
    import psycopg

    schema = f"oac_fleet_{secrets.token_hex(4)}"
    taken: list[int] = []

    class TakingBeforeCommit(PostgresDirectory):
        """Another worker takes Sessions while this one's transaction is open."""

        @contextmanager
        def _tx(self) -> Iterator[Any]:
            with super()._tx() as cur:
                yield cur
                if taking is not None:
                    taken.append(len(taking.acquire("b", 5, ttl=60.0)))

    taking: Directory | None = None
    a = TakingBeforeCommit(dsn, schema=schema)
    b = PostgresDirectory(dsn, schema=schema)
    try:
        a.adopt(SESSIONS)
        b.heartbeat("b")
        taking = b
        a.adopt(SESSIONS)  # the sweep: all active, none parked
        assert taken == [5]
    finally:
        a.close()
        b.close()
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
