"""The fleet's ownership rules (:mod:`openagentcore.runner._fleet_core`), on a model
directory: workers tick at their own phases, die, come back late, and join."""

from __future__ import annotations

import dataclasses
import heapq
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from openagentcore.runner._fleet_core import (
    FORMING_ROOM,
    SessionRow,
    WorkerRow,
    decide,
    fair_share,
    formation_left,
    may_write,
    orphans,
    plan,
)

TTL = 3.0
INTERVAL = 1.0


class ModelDirectory:
    """Rows as the SQL directories keep them; each method is one atomic statement."""

    def __init__(self, sessions: int) -> None:
        self.sessions = {
            f"s{n:03}": SessionRow(f"s{n:03}", "agent", "active", None, 0) for n in range(sessions)
        }
        self.workers: dict[str, WorkerRow] = {}
        #: (session, epoch) -> the owner that took it at that epoch.
        self.taken_at: dict[tuple[str, int], str] = {}

    def heartbeat(self, worker: str, now: float) -> None:
        self.workers[worker] = WorkerRow(worker, now)

    def acquire(self, worker: str, count: int, now: float) -> None:
        free = orphans(self.sessions.values(), self.workers.values(), now, TTL)
        for row in sorted(free, key=lambda r: r.session_id)[:count]:
            taken = dataclasses.replace(row, owner=worker, epoch=row.epoch + 1)
            assert (taken.session_id, taken.epoch) not in self.taken_at
            self.taken_at[(taken.session_id, taken.epoch)] = worker
            self.sessions[row.session_id] = taken

    def release(self, worker: str, session_id: str, epoch: int) -> bool:
        row = self.sessions[session_id]
        if not may_write(row, worker, epoch):
            return False
        self.sessions[session_id] = dataclasses.replace(row, owner=None)
        return True

    def tick(self, worker: str, now: float, slack: int = 1) -> None:
        self.heartbeat(worker, now)
        decided = plan(
            worker,
            list(self.sessions.values()),
            list(self.workers.values()),
            now,
            ttl=TTL,
            slack=slack,
        )
        for session_id, epoch in decided.release:
            assert self.release(worker, session_id, epoch)
        self.acquire(worker, decided.acquire, now)

    def owned_by(self, worker: str) -> list[str]:
        return [s.session_id for s in self.sessions.values() if s.owner == worker]


def run(
    directory: ModelDirectory,
    phases: dict[str, float],
    until: float,
    start: float = 0.0,
    dead: frozenset[str] = frozenset(),
) -> None:
    """Tick every worker not in ``dead`` at its phase, every INTERVAL, from ``start``."""
    queue = [(start + phase, worker) for worker, phase in phases.items() if worker not in dead]
    heapq.heapify(queue)
    while queue and queue[0][0] < until:
        now, worker = heapq.heappop(queue)
        directory.tick(worker, now)
        heapq.heappush(queue, (now + INTERVAL, worker))


@given(st.integers(0, 500), st.integers(1, 50))
def test_fair_shares_cover_every_active_session(active: int, workers: int) -> None:
    share = fair_share(active, workers)
    assert share * workers >= active
    assert (share - 1) * workers < active or share == 0


phases_strategy = st.lists(st.floats(0, INTERVAL, exclude_max=True), min_size=2, max_size=8)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 60), phases_strategy, st.data())
def test_a_dead_workers_sessions_are_owned_again_within_ttl_and_an_interval(
    sessions: int, phase_list: list[float], data: st.DataObject
) -> None:
    phases = {f"w{n}": phase for n, phase in enumerate(phase_list)}
    dead = frozenset(data.draw(st.sets(st.sampled_from(sorted(phases)), max_size=len(phases) - 1)))
    directory = ModelDirectory(sessions)
    run(directory, phases, until=10.0)
    assert not orphans(directory.sessions.values(), directory.workers.values(), 10.0, TTL)
    died_at = 10.0
    run(directory, phases, until=died_at + TTL + INTERVAL, start=died_at, dead=dead)
    check_at = died_at + TTL + INTERVAL
    live = set(phases) - dead
    for row in directory.sessions.values():
        assert row.owner in live, (row, dead)
    assert not orphans(directory.sessions.values(), directory.workers.values(), check_at, TTL)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 80), phases_strategy)
def test_no_worker_holds_more_than_its_share_and_slack(
    sessions: int, phase_list: list[float]
) -> None:
    phases = {f"w{n}": phase for n, phase in enumerate(phase_list)}
    directory = ModelDirectory(sessions)
    run(directory, phases, until=20.0)
    share = fair_share(sessions, len(phases))
    for worker in phases:
        assert len(directory.owned_by(worker)) <= share + 1


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 80), st.integers(1, 6))
def test_a_joining_worker_moves_sessions_only_from_above_the_share_to_below_it(
    sessions: int, workers: int
) -> None:
    phases = {f"w{n}": n / (workers + 1) for n in range(workers)}
    directory = ModelDirectory(sessions)
    run(directory, phases, until=10.0)
    before = {s.session_id: s.owner for s in directory.sessions.values()}
    held = {worker: len(directory.owned_by(worker)) for worker in phases}
    phases["joiner"] = 0.99
    held["joiner"] = 0
    run(directory, phases, until=20.0, start=10.0)
    after = {s.session_id: s.owner for s in directory.sessions.values()}
    share = fair_share(sessions, workers + 1)
    moved = [sid for sid in before if before[sid] != after[sid]]
    for sid in moved:
        giver, taker = before[sid], after[sid]
        assert giver is not None
        assert taker is not None
        assert held[giver] > share + 1, (sid, giver, held)
        assert held[taker] < share, (sid, taker, held)
    excess = sum(count - share for count in held.values() if count > share + 1)
    assert len(moved) <= excess


def test_a_lapsed_owner_is_fenced_out_of_its_taken_session() -> None:
    directory = ModelDirectory(1)
    directory.tick("slow", 0.0)
    (row,) = directory.sessions.values()
    assert row.owner == "slow"
    stale_epoch = row.epoch
    directory.tick("other", TTL + 0.5)  # slow's heartbeat lapsed
    assert directory.owned_by("other") == [row.session_id]
    assert not directory.release("slow", row.session_id, stale_epoch)
    assert directory.owned_by("other") == [row.session_id]


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 30), phases_strategy, st.floats(TTL, 3 * TTL))
def test_never_two_owners_at_one_epoch_when_a_worker_comes_back_late(
    sessions: int, phase_list: list[float], pause: float
) -> None:
    phases = {f"w{n}": phase for n, phase in enumerate(phase_list)}
    directory = ModelDirectory(sessions)
    run(directory, phases, until=5.0)
    held = {(s.session_id, s.epoch) for s in directory.sessions.values() if s.owner == "w0"}
    run(directory, phases, until=5.0 + pause, start=5.0, dead=frozenset({"w0"}))
    # w0 wakes and tries to give back what it held: refused wherever it was taken.
    for session_id, epoch in held:
        row = directory.sessions[session_id]
        assert directory.release("w0", session_id, epoch) == (row.owner == "w0")
    run(directory, phases, until=10.0 + pause, start=5.0 + pause)
    # ModelDirectory.acquire asserts that no (session, epoch) had two owners.
    assert not orphans(directory.sessions.values(), directory.workers.values(), 10.0 + pause, TTL)


class FormingDirectory(ModelDirectory):
    """The model directory with the workers' join times, as the SQL keeps them: a
    worker plans with the time left until its group (its live workers) has formed."""

    def __init__(self, sessions: int, settle: float) -> None:
        super().__init__(sessions)
        self.settle = settle
        self.joined: dict[str, float] = {}

    def tick_forming(self, worker: str, now: float) -> float:
        """One round; returns when the worker plans next (at the formation's end if
        that comes before the next interval)."""
        self.heartbeat(worker, now)
        self.joined.setdefault(worker, now)
        live = [w.worker_id for w in self.workers.values() if now - w.heartbeat < TTL]
        group_age = now - min(self.joined[w] for w in live)
        decided = plan(
            worker,
            list(self.sessions.values()),
            list(self.workers.values()),
            now,
            ttl=TTL,
            slack=1,
            forming_for=formation_left(group_age, self.settle),
        )
        for session_id, epoch in decided.release:
            assert self.release(worker, session_id, epoch)
        self.acquire(worker, decided.acquire, now)
        if decided.forming_for:
            return now + min(INTERVAL, decided.forming_for + 0.001)
        return now + INTERVAL


def start_together(directory: FormingDirectory, phases: dict[str, float], until: float) -> None:
    queue = [(phase, worker) for worker, phase in phases.items()]
    heapq.heapify(queue)
    while queue and queue[0][0] < until:
        now, worker = heapq.heappop(queue)
        heapq.heappush(queue, (directory.tick_forming(worker, now), worker))


together_strategy = st.lists(
    st.floats(0, INTERVAL, exclude_max=True), min_size=2, max_size=FORMING_ROOM + 1
)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 120), together_strategy)
def test_workers_started_within_the_settle_window_take_each_session_once(
    sessions: int, phase_list: list[float]
) -> None:
    """Up to FORMING_ROOM + 1 workers whose first rounds fall within one interval:
    nobody takes more than its final share while the group forms, so no Session moves
    (without the formation, the first took every Session and gave most back)."""
    phases = {f"w{n}": phase for n, phase in enumerate(phase_list)}
    directory = FormingDirectory(sessions, settle=INTERVAL)
    start_together(directory, phases, until=10.0)
    assert all(row.epoch == 1 for row in directory.sessions.values())
    share = fair_share(sessions, len(phases))
    held = sorted(len(directory.owned_by(worker)) for worker in phases)
    assert sum(held) == sessions
    assert held[-1] <= share + 1


def test_without_a_settle_window_the_first_worker_takes_everything_and_gives_back() -> None:
    """The control: the same start with no formation moves Sessions."""
    directory = FormingDirectory(40, settle=0.0)
    start_together(directory, {"a": 0.0, "b": 0.1, "c": 0.2, "d": 0.3}, until=10.0)
    moved = sum(row.epoch - 1 for row in directory.sessions.values())
    assert moved == 30


@given(st.integers(0, 200), st.integers(1, 20), st.integers(0, 5), st.floats(0.01, 5))
def test_a_forming_worker_leaves_room_for_more_workers_and_gives_back_nothing_early(
    active: int, live: int, held: int, left: float
) -> None:
    held = min(held, active)
    mine = [(f"s{n}", 1) for n in range(held)]
    free = active - held
    forming = decide(mine, active=active, live=live, free=free, forming_for=left)
    formed = decide(mine, active=active, live=live, free=free)
    share = fair_share(active, live)
    room = math.ceil(active / (live + FORMING_ROOM))
    assert forming.acquire == max(0, min(room - held, free))
    assert forming.forming_for == left
    assert forming.release == formed.release  # the cap bounds taking, not giving back
    assert formed.acquire == max(0, min(share - held, free))
