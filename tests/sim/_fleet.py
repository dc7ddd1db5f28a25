"""Fleet workers on virtual time: ownership of Sessions under lapses, crashes and exits.

Workers run the loop of :mod:`openagentcore.runner._fleet` as a state machine on a
simulated clock, deciding with the product's own rules (:mod:`._fleet_core`:
``decide``, ``is_live``, ``may_write``) against a simulated directory that applies
them as the SQL of :mod:`._fleet_directory` does: a heartbeat stamps the directory's
clock, ``acquire`` takes orphans (active, owner absent or lapsed) and bumps their
epochs, ``release``, ``park`` and ``leave`` change only rows the writer holds at its
epoch. A worker's followers serve its Sessions' calls, each gated by a claim (the
first claim wins; a claim whose worker died after its effect is in doubt, never run
again) as the result store gates them.

Faults, drawn per seed: a worker's loop stalls (it lapses while its followers keep
serving, so two workers follow a Session until the stale one's next round), a worker
crashes (mid-call too), one exits with SIGTERM (handing its Sessions over), new ones
join, the directory is unreachable for a while, Sessions are adopted late, calls
arrive while a Session is parked.

Invariants, checked as the history runs and at its end:

- never two owners at one epoch of a Session, and only the owner at the current
  epoch changes a Session's row (the fence);
- once the faults end, every active Session is owned by a live worker that follows
  it, within the TTL and a few rounds;
- each call runs at most once across ownership changes, and every call is answered.

Each seed also runs a *cold start*: 2 to ``FORMING_ROOM + 1`` workers started within
half a heartbeat interval over Sessions adopted before them, without faults or
parking (a parked Session shrinks the shares, and the excess that frees moves as
designed). There each Session is taken once: while the group forms nobody takes more
than its final share, so nothing moves when the group has formed.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from openagentcore.runner import _fleet_core
from openagentcore.runner._fleet_core import Plan, SessionRow, WorkerRow

from ._tasks import Violation

__all__ = ["FleetWorld", "run_fleet_seed"]

HEARTBEAT = 1.0
TTL = 3.0
PARK_AFTER = 2.0
SWEEP = 5.0
#: When the faults end; the history then runs fault-free until ``END``.
CHAOS_ENDS = 30.0
#: Every active Session must be owned by a live follower this long after the faults.
SETTLE_WITHIN = TTL + 3 * HEARTBEAT
END = CHAOS_ENDS + SETTLE_WITHIN + 10.0
#: A cold start's history: its calls are answered within seconds.
COLD_START_END = 10.0
#: How long a call's function runs.
CALL_SECONDS = (0.05, 0.6)


@dataclass
class Row:
    agent_id: str
    state: str = "active"
    owner: str | None = None
    epoch: int = 0
    updated_at: float = 0.0


@dataclass
class Claim:
    worker: str
    answered: bool = False


class Directory:
    """The directory's rows and statements, as the SQL applies them."""

    def __init__(self, world: FleetWorld) -> None:
        self.world = world
        self.workers: dict[str, float] = {}
        #: When each worker first heartbeat (kept while it lapses, dropped on leave).
        self.joined: dict[str, float] = {}
        self.rows: dict[str, Row] = {}
        self.down_until = 0.0

    def _reach(self) -> None:
        if self.world.now < self.down_until:
            raise ConnectionError("directory unreachable")

    def _live(self, ttl: float) -> set[str]:
        now = self.world.now
        return {
            w
            for w, beat in self.workers.items()
            if self.world.is_live(WorkerRow(w, beat), now, ttl)
        }

    def heartbeat(self, worker: str) -> None:
        self._reach()
        self.workers[worker] = self.world.now
        self.joined.setdefault(worker, self.world.now)

    def plan(self, worker: str, max_sessions: int | None = None) -> tuple[Plan, dict[str, int]]:
        self._reach()
        live = self._live(TTL)
        active = [(s, r) for s, r in self.rows.items() if r.state == "active"]
        free = sum(1 for _, r in active if r.owner is None or r.owner not in live)
        held = {s: r.epoch for s, r in active if r.owner == worker}
        group_age = self.world.now - min((self.joined[w] for w in live), default=0.0)
        decided = _fleet_core.decide(
            sorted(held.items()),
            active=len(active),
            live=max(1, len(live)),
            free=free,
            slack=1,
            max_sessions=max_sessions,
            forming_for=_fleet_core.formation_left(group_age, self.world.settle),
        )
        return decided, held

    def acquire(self, worker: str, count: int) -> list[tuple[str, int]]:
        self._reach()
        if count <= 0:
            return []
        live = self._live(TTL)
        orphans = sorted(
            (r.updated_at, s)
            for s, r in self.rows.items()
            if r.state == "active" and (r.owner is None or r.owner not in live)
        )
        taken = []
        for _, session in orphans[:count]:
            row = self.rows[session]
            row.owner, row.epoch = worker, self.world.bump(row.epoch)
            row.updated_at = self.world.now
            self.world.owned(session, row.epoch, worker)
            taken.append((session, row.epoch))
        return taken

    def _change(self, worker: str, session: str, epoch: int, park: bool) -> bool:
        row = self.rows[session]
        view = SessionRow(session, row.agent_id, "active", row.owner, row.epoch)
        if not self.world.may_write(view, worker, epoch):
            return False
        self.world.fenced_write(session, worker, epoch)
        row.owner = None
        if park:
            row.state = "parked"
        row.updated_at = self.world.now
        return True

    def release(self, worker: str, held: list[tuple[str, int]]) -> int:
        self._reach()
        return sum(self._change(worker, s, e, park=False) for s, e in held)

    def park(self, worker: str, session: str, epoch: int) -> bool:
        self._reach()
        return self._change(worker, session, epoch, park=True)

    def leave(self, worker: str) -> None:
        self._reach()
        for session, row in self.rows.items():
            if row.owner == worker:
                self.world.fenced_write(session, worker, row.epoch)
                row.owner, row.updated_at = None, self.world.now
        self.workers.pop(worker, None)
        self.joined.pop(worker, None)

    def adopt(self, session: str, agent: str = "agent") -> None:
        self._reach()
        row = self.rows.get(session)
        if row is None:
            self.rows[session] = Row(agent, updated_at=self.world.now)
        elif row.state == "parked":
            row.state, row.updated_at = "active", self.world.now


@dataclass
class Follower:
    session: str
    epoch: int
    idle_since: float | None = None
    busy: bool = False


@dataclass
class Worker:
    name: str
    alive: bool = True
    leaving: bool = False
    stalled_until: float = 0.0
    following: dict[str, Follower] = field(default_factory=dict)


class FleetWorld:
    """One seeded history of a fleet (see the module's docstring)."""

    def __init__(self, seed: int, *, cold_start: bool = False) -> None:
        self.seed = seed
        self.cold_start = cold_start
        self.rng = random.Random(seed)
        self.now = 0.0
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self.directory = Directory(self)
        self.workers: dict[str, Worker] = {}
        self._names = itertools.count()
        #: Calls per Session (ids in arrival order), their claims and effects.
        self.calls: dict[str, list[str]] = {}
        self.claims: dict[str, Claim] = {}
        self.effects: dict[str, int] = {}
        self.in_doubt: set[str] = set()
        #: (session, epoch) -> the owner the directory gave it to.
        self.owners: dict[tuple[str, int], str] = {}
        # The rules the product decides with; the negative controls replace them.
        self.is_live = _fleet_core.is_live
        self.may_write = _fleet_core.may_write
        self.bump: Callable[[int], int] = lambda epoch: epoch + 1
        self.claims_gate_calls = True
        #: How long a group forms after its first worker joins (the product's
        #: heartbeat interval).
        self.settle = HEARTBEAT
        self.park_after = PARK_AFTER
        rng = self.rng
        if cold_start:  # no faults, no parking: every move is the formation's doing
            self.p_stall = self.p_crash = self.p_exit = self.p_join = self.p_outage = 0.0
            self.park_after = float("inf")
            return
        self.p_stall = rng.choice([0.0, 0.02, 0.06])
        self.p_crash = rng.choice([0.0, 0.01, 0.03])
        self.p_exit = rng.choice([0.0, 0.01])
        self.p_join = rng.choice([0.0, 0.02])
        self.p_outage = rng.choice([0.0, 0.005])

    # -- the clock -------------------------------------------------------------------

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (when, next(self._order), action))

    def after(self, delay: float, action: Callable[[], None]) -> None:
        self.at(self.now + delay, action)

    def run(self) -> FleetWorld:
        if self.cold_start:
            return self.run_cold_start()
        for _ in range(self.rng.randint(2, 4)):
            self.start_worker()
        sessions = self.rng.randint(3, 14)
        for n in range(sessions):
            starts = self.rng.uniform(0, CHAOS_ENDS * 0.6)
            self.after(starts, functools.partial(self.new_session, f"s{n:02}"))
        self.at(CHAOS_ENDS, self.end_chaos)
        self.at(END, lambda: None)
        while self._events:
            when, _, action = heapq.heappop(self._events)
            if when > END:
                break
            self.now = when
            action()
        self.check_end()
        return self

    def run_cold_start(self) -> FleetWorld:
        """A backlog adopted first, then workers started within half a heartbeat."""
        rng = self.rng
        for n in range(rng.randint(1, 60)):
            session = f"s{n:02}"
            self.calls[session] = []
            for _ in range(rng.randint(1, 4)):
                self.new_call(session)
            self.directory.adopt(session)
        for _ in range(rng.randint(2, _fleet_core.FORMING_ROOM + 1)):
            self.start_worker(within=HEARTBEAT / 2)
        self.at(COLD_START_END, lambda: None)
        while self._events:
            when, _, action = heapq.heappop(self._events)
            if when > COLD_START_END:
                break
            self.now = when
            action()
        self.check_end()
        taken: dict[str, int] = {}
        for session, _ in self.owners:
            taken[session] = taken.get(session, 0) + 1
        moved = sorted(session for session, count in taken.items() if count > 1)
        if moved:
            raise Violation(
                f"seed {self.seed}: {len(self.workers)} workers started together over "
                f"{len(self.calls)} Sessions took {len(moved)} of them more than once "
                f"({', '.join(moved[:3])}...)"
            )
        return self

    @property
    def chaos(self) -> bool:
        return self.now < CHAOS_ENDS

    # -- Sessions and their calls ------------------------------------------------------

    def new_session(self, session: str) -> None:
        self.calls[session] = []
        for _ in range(self.rng.randint(1, 4)):
            self.new_call(session)
        # Adopted at once, or found by the next discovery.
        self.after(0.0 if self.rng.random() < 0.5 else 2.0, lambda: self._adopt(session, wake=True))
        if self.rng.random() < 0.5:  # more calls later: a parked Session may wait for them
            self.after(self.rng.uniform(1, 15), lambda: self.later_calls(session))

    def later_calls(self, session: str) -> None:
        for _ in range(self.rng.randint(1, 3)):
            self.new_call(session)
        if self.rng.random() < 0.5:
            self._adopt(session, wake=True)  # the application adopts; else the sweep wakes it

    def new_call(self, session: str) -> None:
        call = f"{session}/c{len(self.calls[session])}"
        self.calls[session].append(call)

    def pending(self, session: str) -> list[str]:
        return [c for c in self.calls[session] if not self._answered(c)]

    def _answered(self, call: str) -> bool:
        claim = self.claims.get(call)
        return claim is not None and claim.answered

    def _adopt(self, session: str, *, wake: bool) -> None:
        try:
            self.directory.adopt(session)
        except ConnectionError:
            self.after(1.0, lambda: self._adopt(session, wake=wake))

    # -- workers ---------------------------------------------------------------------

    def start_worker(self, within: float = HEARTBEAT) -> None:
        worker = Worker(f"w{next(self._names)}")
        self.workers[worker.name] = worker
        self.after(self.rng.uniform(0, within), lambda: self.round(worker))
        self.after(SWEEP, lambda: self.sweep(worker))

    def end_chaos(self) -> None:
        if not any(w.alive and not w.leaving for w in self.workers.values()):
            self.start_worker()
        self.directory.down_until = min(self.directory.down_until, self.now)

    def round(self, worker: Worker) -> None:
        """One round of the fleet loop: heartbeat, plan, drop fenced, release, acquire."""
        if not worker.alive or worker.leaving:
            return
        if self.now < worker.stalled_until:  # no round, no heartbeat: the loop is stuck
            self.at(worker.stalled_until, lambda: self.round(worker))
            return
        if self.chaos and self._faults(worker):
            return
        directory = self.directory
        plan: Plan | None = None
        try:
            directory.heartbeat(worker.name)
            plan, held = directory.plan(worker.name)
            for session, follower in list(worker.following.items()):
                if held.get(session) != follower.epoch:  # taken over, or released: fenced
                    del worker.following[session]
            for session, _ in plan.release:
                worker.following.pop(session, None)
            if plan.release:
                directory.release(worker.name, list(plan.release))
            # Held but not followed (a release that failed): given back now.
            unfollowed = [(s, e) for s, e in held.items() if s not in worker.following]
            if unfollowed:
                directory.release(worker.name, unfollowed)
            for session, epoch in directory.acquire(worker.name, plan.acquire):
                follower = Follower(session, epoch)
                worker.following[session] = follower
                self.after(0.01, functools.partial(self.follow, worker, follower))
        except ConnectionError:
            pass
        pause = HEARTBEAT * self.rng.uniform(0.9, 1.1)
        if plan is not None and plan.forming_for:
            # The whole share once the group has formed: a moment after, as a real
            # round's statements take time (exactly then, the clock's rounding can
            # leave a remainder too small to move it, and the round repeats forever).
            pause = min(pause, plan.forming_for + 0.001)
        self.after(pause, lambda: self.round(worker))

    def _faults(self, worker: Worker) -> bool:
        """Draw this round's faults; True when the worker is gone."""
        rng = self.rng
        if rng.random() < self.p_outage:
            self.directory.down_until = self.now + rng.uniform(0.5, 2 * TTL)
        if rng.random() < self.p_join:
            self.start_worker()
        if rng.random() < self.p_crash:
            worker.alive = False
            worker.following.clear()
            return True
        if rng.random() < self.p_exit:
            self.exit(worker)
            return True
        if rng.random() < self.p_stall:
            # Longer than the TTL sometimes: the others take its Sessions meanwhile.
            worker.stalled_until = self.now + rng.uniform(0.5, 2.5 * TTL)
            self.at(worker.stalled_until, lambda: self.round(worker))
            return True
        return False

    def exit(self, worker: Worker) -> None:
        """SIGTERM: finish in-flight calls, then hand every Session over."""
        worker.leaving = True

        def hand_over() -> None:
            if any(f.busy for f in worker.following.values()):
                self.after(0.1, hand_over)
                return
            worker.following.clear()
            with contextlib.suppress(ConnectionError):  # else the others wait for the TTL
                self.directory.leave(worker.name)
            worker.alive = False

        hand_over()

    def sweep(self, worker: Worker) -> None:
        """Wake parked Sessions that wait for a call (the slow full listing)."""
        if not worker.alive:
            return
        if not worker.leaving and self.now >= worker.stalled_until:
            for session in self.calls:
                row = self.directory.rows.get(session)
                if row is not None and row.state == "parked" and self.pending(session):
                    self._adopt(session, wake=True)
        self.after(SWEEP, lambda: self.sweep(worker))

    def follow(self, worker: Worker, follower: Follower) -> None:
        """A follower's step: claim and run the next pending call, or linger and park.
        It serves on while its worker's loop stalls (a separate task)."""
        if not worker.alive or worker.following.get(follower.session) is not follower:
            return
        if worker.leaving:
            return
        session = follower.session
        for call in self.pending(session):
            claim = self.claims.get(call)
            if claim is not None and not self.claims_gate_calls:
                claim = None  # the control: ownership, not the claim, gates the call
            if claim is None:
                self.claims[call] = Claim(worker.name)
                self.run_call(worker, follower, call)
                return
            if not self.workers[claim.worker].alive:
                # Its worker died after the effect: in doubt, answered, never run again.
                claim.answered = True
                self.in_doubt.add(call)
        if follower.idle_since is None:
            follower.idle_since = self.now
        lingered = self.now - follower.idle_since >= self.park_after
        if lingered and not self.pending(session) and self.now >= worker.stalled_until:
            with contextlib.suppress(ConnectionError):
                if self.directory.park(worker.name, session, follower.epoch):
                    del worker.following[session]
                    return
        self.after(0.2, lambda: self.follow(worker, follower))

    def run_call(self, worker: Worker, follower: Follower, call: str) -> None:
        follower.busy, follower.idle_since = True, None
        self.effects[call] = self.effects.get(call, 0) + 1
        if self.effects[call] > 1:
            raise Violation(f"seed {self.seed}: call {call} ran {self.effects[call]} times")

        def done() -> None:
            follower.busy = False
            if not worker.alive:
                return  # crashed mid-call: the effect happened, no answer
            self.claims[call].answered = True
            self.follow(worker, follower)

        self.after(self.rng.uniform(*CALL_SECONDS), done)

    # -- invariants ------------------------------------------------------------------

    def owned(self, session: str, epoch: int, worker: str) -> None:
        other = self.owners.setdefault((session, epoch), worker)
        if other != worker:
            raise Violation(
                f"seed {self.seed}: Session {session} has two owners at epoch {epoch}: "
                f"{other} and {worker}"
            )

    def fenced_write(self, session: str, worker: str, epoch: int) -> None:
        row = self.directory.rows[session]
        if row.owner != worker or row.epoch != epoch:
            raise Violation(
                f"seed {self.seed}: {worker} changed Session {session} at epoch {epoch}, "
                f"owned by {row.owner} at epoch {row.epoch}"
            )

    def check_end(self) -> None:
        live = {w.name for w in self.workers.values() if w.alive and not w.leaving}
        for session, row in self.directory.rows.items():
            if row.state != "active":
                continue
            if row.owner not in live:
                raise Violation(
                    f"seed {self.seed}: Session {session} is active and owned by "
                    f"{row.owner}, not a live worker, {SETTLE_WITHIN + 10:g} s after the faults"
                )
            follower = self.workers[row.owner].following.get(session)
            if follower is None or follower.epoch != row.epoch:
                raise Violation(
                    f"seed {self.seed}: {row.owner} owns {session} but does not follow it"
                )
        for session in self.calls:
            waiting = self.pending(session)
            if waiting:
                raise Violation(f"seed {self.seed}: calls {waiting} were never answered")


def run_fleet_seed(seed: int, mutate: Callable[[FleetWorld], None] | None = None) -> FleetWorld:
    """The seed's history with faults (returned), then its cold start."""
    worlds = [FleetWorld(seed), FleetWorld(seed, cold_start=True)]
    for world in worlds:
        if mutate is not None:
            mutate(world)
        world.run()
    return worlds[0]
