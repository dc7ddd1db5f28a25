"""A deterministic world for the runner: one seed replays a whole faulty history.

Each worker is a real runner (``AsyncServing``: ``serve``, ``run_turn``, ``recover``,
the requests effects make, the shared ``run_round`` and ``carry``, the real
:class:`RunnerCore` and the real store rules of :class:`MemoryResultStore`) whose
coroutines are stepped on a simulated clock (:mod:`._tasks`), against a simulated
server (:mod:`._server`) that delivers every answer after a seeded delay. Some workers
serve Sessions until idle (or recover them), others drive Turns with ``run_turn``.

Faults: store outages, commits whose answer is an error, slow acknowledgements, lost
POST responses, 5xx, redirects, transient and final 409s, slow responses and request
timeouts, calls announced before they accept results, dropped and duplicated stream
events, cancelled and failed Turns, Turns that end before ``run_turn`` learns their id,
functions that exit without a result or finish after their timeout, ``on_in_doubt``
hooks that raise, answer, fail in their own words or ask to rerun, workers that serve
one function only (and leave or fail the calls of the other), ``stop()`` and
``stop(force=True)`` while functions run, workers killed at any effect boundary, and an
operator who settles calls in doubt and answers refused results by hand (``calls
resolve``) while workers run.

Afterwards :meth:`World.check` asserts the runner's promises.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import itertools
import logging
import random
import re
import zlib
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from openagentcore import (
    APIConnectionError,
    APIError,
    APIResponseValidationError,
    InternalServerError,
    NotFoundError,
    resolve_call,
)
from openagentcore.runner import RunnerError, ServeReport, ServeTimeout
from openagentcore.runner._context import CallContext
from openagentcore.runner._core import Phase
from openagentcore.runner._effects import CallSettled, CallStarted, LogNote, Note
from openagentcore.runner._housekeeping import STORE_RETRY_MAX_DELAY
from openagentcore.runner._results import ENDED_WITHOUT_RESULT, IN_DOUBT_ERROR, INTERNAL_ERROR
from openagentcore.store import (
    CallKey,
    CallRecord,
    CallState,
    InvalidTransitionError,
)
from openagentcore.store._records import MANUAL_RERUN

from ._audit import AuditedStore, produced
from ._runner import (
    CHECKED_BY_THE_APPLICATION,
    FAILED_BY_THE_APPLICATION,
    LEASE_SECONDS,
    MAX_ATTEMPTS,
    UNREACHABLE_TIMEOUT,
    SimClient,
    SimRunner,
)
from ._server import Server, ServerCall
from ._tasks import SimFuture, Task, Violation

__all__ = ["Faults", "Violation", "World", "run_seed"]

#: How long the final, fault-free worker has to settle everything.
FINAL_TIMEOUT = 60.0
#: When chaos ends: every worker is killed and a clean one settles what is left.
CHAOS_ENDS = 8.0
#: How long after a serve with no deadline meets a server that fails every request it
#: must have returned: ``unreachable_timeout``, plus the longest reconnect delay (the
#: runner's default ``reconnect_max_delay``) and a request's slowest round trip.
GIVE_UP_WITHIN = UNREACHABLE_TIMEOUT + 2.0 + 1.0
#: How long after its Session last changed the fault-free worker's serve of it must
#: return: the output Item's way back, a read, the progress marks' write (flushed as soon
#: as nothing else is left) and a few round trips (0.12 s at most in seeds 0-79, 0.36 s
#: seen once in a long-running process).
SETTLED_RETURN_WITHIN = 0.45
#: How long after its worker was first told its Session is gone (a 404) a serve with no
#: deadline must have ended: a round of the loop (the shortest grace is none).
GONE_WITHIN = 0.05
#: Requests one worker may send in a second to a server that fails every request.
FAILING_SERVER_RATE = 60
#: How long the runner's store work may wait for one of the store's threads (each call
#: takes at most 20 ms when the store works): a third of the lease, the renewal cadence.
STORE_WAIT_LIMIT = LEASE_SECONDS / 3
#: How long a stopped ``serve(until="forever")`` may take to return while the server
#: and the store work (beyond the grace for running functions): a few posts and reads.
STOP_LIMIT = 3.0
#: How often a stopped serve's watch looks at the calls it waits for.
STOP_WATCH_EVERY = 0.1
#: Where the store's clock starts.
STORE_EPOCH = 1_700_000_000.0
#: How often the world looks at the leases of live workers.
LEASE_CHECK_EVERY = 0.05
#: What the operator's results say: no function produces them.
BY_HAND_OUTPUT = "settled by hand"
BY_HAND_ERROR = "refused by hand"
#: Every outcome a ``CallSettled`` note may name.
_OUTCOMES = frozenset(
    {
        "submitted",
        "applied",
        "duplicate",
        "rejected",
        "conflict",
        "abandoned",
        "in_doubt",
        "left_pending",
        "in_doubt_elsewhere",
        "released",
        "session_gone",
        "abandoned_by_serve",
    }
)
#: The levels the core's log lines may have: the standard ones the observer logs at.
_LOG_LEVELS = frozenset(
    {logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL}
)
#: A ``%`` conversion in a log message: without arguments, logging leaves it as it is.
_CONVERSION = re.compile(r"%[-#0 +]*\d*(?:\.\d+)?[a-zA-Z]")
#: What the operator passes to ``resolve_call`` for each kind of decision.
_BY_HAND: dict[str, dict[str, Any]] = {
    "output": {"output": BY_HAND_OUTPUT},
    "failed": {"failed": BY_HAND_ERROR},
    "rerun": {"rerun": True},
}


@dataclass(frozen=True)
class Decision:
    """What the operator last decided for a call (``output``, ``failed`` or ``rerun`` for
    a call in doubt, ``answer`` on the server for a refused one), and the call's attempt
    count, its function's runs and the workers' crashes then."""

    kind: str
    attempts: int
    event: dict[str, Any] | None
    runs: int
    crashes: int


@dataclass(frozen=True)
class Faults:
    """Probabilities of each fault, drawn per seed."""

    store_down: float = 0.0
    commit_then_error: float = 0.0
    slow_ack: float = 0.0
    post_lost: float = 0.0
    post_5xx: float = 0.0
    post_redirect: float = 0.0
    post_pending_409: float = 0.0
    read_error: float = 0.0
    slow_response: float = 0.0
    stream_drop: float = 0.0
    stream_dup: float = 0.0
    crash: float = 0.0
    function_exit: float = 0.0
    cancel_turn: float = 0.0
    early_announce: float = 0.0
    #: Calls whose ids the store refuses for good (as PostgreSQL refuses a NUL).
    unstorable_id: float = 0.0
    #: ``on_in_doubt`` hooks that block their thread for seconds.
    slow_hook: float = 0.0
    #: Turns cancelled while the streams of their Session are down.
    cancel_unseen: float = 0.0
    #: Functions that run longer than a lease.
    slow_function: float = 0.0
    #: Results the server refuses for good (422: it cannot take that output); the Turn
    #: then waits until a person settles the call.
    post_invalid: float = 0.0

    @classmethod
    def draw(cls, rng: random.Random) -> Faults:
        def p(high: float) -> float:
            return rng.choice((0.0, 0.0, rng.uniform(0, high)))

        return cls(
            store_down=p(0.2),
            commit_then_error=p(0.15),
            slow_ack=p(0.3),
            post_lost=p(0.2),
            post_5xx=p(0.2),
            post_redirect=p(0.03),
            post_pending_409=p(0.1),
            read_error=p(0.2),
            slow_response=p(0.1),
            stream_drop=p(0.1),
            stream_dup=p(0.2),
            crash=p(0.08),
            function_exit=p(0.5),
            cancel_turn=p(0.1),
            early_announce=p(0.3),
            unstorable_id=p(0.2),
            slow_hook=p(0.8),
            cancel_unseen=p(1.0),
            slow_function=p(0.5),
        )


#: How the server refuses a result that the runner must leave to a person (``rejected``):
#: a call it does not know as pending (400) or an output it cannot take (422).
REFUSED_FOR_GOOD = frozenset({"unknown", "invalid"})


@dataclass(slots=True)
class EarlyRun:
    """An idempotent run started as its claim was sent, before the store held it."""

    owner: str
    key: CallKey
    #: Its claim was granted (else its outcome was dropped, or its worker died first).
    granted: bool = False


class World:
    """Everything one seed runs: clock, scheduler, server, store, workers."""

    def __init__(self, seed: int, *, mutate: Callable[[SimRunner], None] | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.faults = Faults.draw(self.rng)
        # Drawn apart (as the timeout below), so seeds without it replay as before.
        invalid = random.Random(f"post_invalid {seed}")
        self.faults = dataclasses.replace(
            self.faults, post_invalid=invalid.choice((0.0, 0.0, invalid.uniform(0, 0.05)))
        )
        #: The functions' ``timeout``, drawn apart so that seeds without one replay the
        #: histories they had before timeouts were simulated.
        self.timeout = random.Random(f"timeout {seed}").choice((None, None, 0.05, 0.15))
        #: Each function's own ``max_concurrency`` (none in most histories), drawn apart.
        limits = random.Random(f"limits {seed}")
        self.limits: dict[str, int] = {
            name: limits.choice((1, 2)) for name in ("charge", "reserve") if limits.random() < 0.25
        }
        #: Whether some calls' functions raise (the application's own failure), drawn
        #: apart; which ones follows from the call's ids.
        self.declining = random.Random(f"declines {seed}").random() < 0.3
        #: The operator draws from a generator of its own, so that histories without one
        #: replay as they did before it was simulated.
        self.operator = random.Random(f"operator {seed}")
        self.operator_rate = self.operator.choice((0.0, 0.0, self.operator.uniform(0.5, 3.0)))
        #: The ``on_in_doubt`` hook every worker shares in some histories (``fail`` with
        #: the application's own error, or ``rerun``), instead of drawing its own.
        hooks = random.Random(f"hooks {seed}")
        self.in_doubt_hook: str | None = hooks.choice((None, None, None, "fail", "rerun"))
        if self.in_doubt_hook is None and hooks.random() < 0.2:
            self.in_doubt_hook = "unsendable"
        #: The operator's last decision for each call it settled by hand.
        self.decisions: dict[CallKey, Decision] = {}
        #: Runs a person allowed on top of the function's own limit.
        self.reruns_by_hand: Counter[CallKey] = Counter()
        #: A window in which the server fails every request (502, or 200 with a web
        #: page): its start, end and kind; drawn apart, as the operator is.
        outage = random.Random(f"outage {seed}")
        self.outage: tuple[float, float, str] | None = None
        if outage.random() < 0.3:
            start = outage.uniform(0.3, 2.0)
            self.outage = (start, start + outage.uniform(5.5, 7.0), outage.choice(("5xx", "html")))
            if outage.random() < 1 / 3:  # a server that refuses connections
                self.outage = (*self.outage[:2], "refused")
        #: A served Session deleted while workers serve it, and when; drawn apart.
        deletion = random.Random(f"deletion {seed}")
        self.deletion: float | None = (
            deletion.uniform(0.3, CHAOS_ENDS - 1.0) if deletion.random() < 0.2 else None
        )
        #: Steps that also require an action no function answers (an approval, an
        #: Environment), in a fifth of the histories: drawn from this generator, apart.
        actions = random.Random(f"actions {seed}")
        self.other_actions: random.Random | None = actions if actions.random() < 0.2 else None
        #: A worker (by generation) cut off from the store for a while, longer than a
        #: lease: the others find its claims stale meanwhile. Drawn apart.
        self._cut = random.Random(f"cut off {seed}")
        self.cut: tuple[int, float, float] | None = None
        #: The worker cut off, from when until when: from its first function start
        #: after the cut's time (its lease then lapses while the function runs).
        self.cut_window: tuple[int, float, float] | None = None
        #: A promise broken where the runner would catch the Violation (inside a
        #: function, which the runner reports as failed): raised by the scheduler.
        self.broken: Violation | None = None
        #: When each worker's store last failed or was slow (world time).
        self.troubled_at: dict[int, float] = {}
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self.store = AuditedStore(self)
        #: The call each stored idempotency key was claimed for (no two calls share one).
        self.idempotency_keys: dict[str, CallKey] = {}
        #: The idempotency key functions were given for each call, and the reverse.
        self.context_keys: dict[CallKey, str] = {}
        self.context_key_owners: dict[str, CallKey] = {}
        self.mutate = mutate
        self.server = Server(self)
        #: Calls the store refuses to record (their ids cannot be stored).
        self.unstorable: set[CallKey] = set()
        #: Runs of each call's function (effects).
        self.runs: Counter[CallKey] = Counter()
        #: The claims and take-overs the store granted: owner, call and attempt.
        self.granted: set[tuple[str, CallKey, int]] = set()
        #: Idempotent runs started as their claim was sent, before the store held it
        #: for their worker (the fast path).
        self.early_runs: list[EarlyRun] = []
        #: Results posted before the store held them as saved (an idempotent function's
        #: result goes out as it is saved), by call.
        self.posted_ahead: dict[CallKey, list[dict[str, Any]]] = {}
        #: The result each runner first posted for each call: never another after it.
        self.posted_by: dict[tuple[str, CallKey], dict[str, Any]] = {}
        #: The calls each fault-free worker found in doubt (it marked them so, or
        #: decided them from that state), by its generation.
        self.found_in_doubt: set[tuple[int, CallKey]] = set()
        #: Workers killed so far.
        self.crashes = 0
        #: Every serve's report, with the generation of the worker it served on.
        self.reports: list[tuple[int, ServeReport]] = []
        self.chaos = True
        self.generation = itertools.count(1)
        self.workers: list[SimWorker] = []
        #: Sessions whose Turns some client already had started (served, not driven).
        self.served: list[str] = []
        #: Sessions whose Turns ``run_turn`` starts, one driving worker each.
        self.driven: list[str] = []
        for index in range(self.rng.randint(1, 2)):
            session = self.server.add_session(f"sess_{index}")
            self.server.open_turn(session, self.server.draw_steps(session, few=False))
            self.served.append(session.id)

    # -- scheduling -----------------------------------------------------------------------

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (when, next(self._order), action))

    def later(self, low: float, high: float, action: Callable[[], None]) -> None:
        self.at(self.now + self.rng.uniform(low, high), action)

    def chance(self, probability: float) -> bool:
        return self.chaos and probability > 0 and self.rng.random() < probability

    def run_until(self, end: float, *, stop: Callable[[], bool] | None = None) -> None:
        queue = self._queue
        while queue and queue[0][0] <= end and (stop is None or not stop()):
            when, _, action = heapq.heappop(queue)
            if when > self.now:
                self.now = when
            action()
            if self.broken is not None:
                raise self.broken

    # -- the whole history -------------------------------------------------------------------

    def run(self) -> None:
        # Each worker serves every Session, or drives Turns of a Session of its own.
        roles = [
            f"sess_w{index}" if self.rng.random() < 0.5 else None
            for index in range(self.rng.randint(1, 3))
        ]
        if self._cut.random() < 0.25:
            # One of the workers that serve every Session, and another one that does
            # and finds its claims stale meanwhile.
            roles.append(None)
            serving = [index + 1 for index, role in enumerate(roles) if role is None]
            armed = self._cut.uniform(0.3, 5.0)
            self.cut = (self._cut.choice(serving), armed, self._cut.uniform(1.2, 3.0))
        self.driven = [self.server.add_session(role).id for role in roles if role]
        for role in roles:
            self.start_worker(drives=role)
        if self.operator_rate:
            self._operator_looks()
        if self.outage is not None:
            self.at(self.outage[0], self.server.drop_every_stream)
        if self.deletion is not None:
            self.at(self.deletion, self._delete_a_session)
        self._check_leases()
        # Some workers are closed by their application while they serve (drawn apart):
        # close() returns once what they started is settled and marked, or when their
        # grace runs out.
        closing = random.Random(f"close {self.seed}")
        for worker in self.workers:
            if closing.random() < 0.3:
                self.at(closing.uniform(0.5, CHAOS_ENDS - 2.5), worker.start_closing)
        self.run_until(CHAOS_ENDS)
        # Chaos ends: every worker dies, nothing fails any more, and one clean worker
        # settles everything that is left, as an operator's restart would, and
        # drives a few more Turns.
        self.chaos = False
        for worker in self.workers:
            worker.crash()
        self.run_until(self.now + LEASE_SECONDS * 1.5)
        final = self.start_worker(final=True)
        self.run_until(self.now + FINAL_TIMEOUT + 10.0, stop=final.finished)
        if not final.finished():
            raise Violation(f"seed {self.seed}: the final worker did not finish")

    def _delete_a_session(self) -> None:
        """A served Session is deleted: from now on every request about it is a 404."""
        self.server.delete(self.served[-1])

    def lost_race(self, runner: SimRunner, key: CallKey, outcome: dict[str, Any]) -> None:
        """``runner`` saved its function's result and found another one saved first
        (another worker's verdict): what its function produced is kept beside the
        record as its late outcome (docs/fleet.md), not dropped, unless it dies first."""
        worker = runner.worker

        def look() -> None:
            if worker.alive and (key, outcome) not in runner.late_kept:
                raise Violation(
                    f"seed {self.seed}: {runner._core.owner}'s {key.call_id} finished after "
                    "another worker's verdict was saved, and its outcome was not kept"
                )

        self.at(self.now + LEASE_SECONDS, look)

    def told_gone(self, worker: SimWorker, session_id: str) -> None:
        """A 404 about ``session_id`` reached ``worker`` for the first time: its serves
        of that Session with no deadline must end at once (by ``GONE_WITHIN``), with an
        error that says the Session no longer exists (checked as they end)."""
        told = self.now

        def look() -> None:
            serving = worker.deadline_less_of.get(session_id, float("inf"))
            if worker.alive and serving <= told:
                raise Violation(
                    f"seed {self.seed}: a serve with no deadline of {session_id} ran on "
                    f"{GONE_WITHIN:g} s after {worker.runner._core.owner} was told the "
                    "Session is gone (404)"
                )

        self.at(self.now + GONE_WITHIN, look)

    def gone(self, session_id: str) -> bool:
        return self.server.sessions[session_id].deleted_at is not None

    # -- what the world watches while workers run ------------------------------------------

    def failing(self) -> str | None:
        """The kind of outage the server is in now, if it fails every request."""
        if self.outage is None or not self.chaos:
            return None
        start, end, kind = self.outage
        return kind if start <= self.now < end else None

    def failed_between(self, begin: float, end: float) -> bool:
        """Whether the server failed every request at some time in [begin, end]."""
        if self.outage is None:
            return False
        start, stop, _ = self.outage
        return begin <= stop and start <= end

    def cut_off(self, worker: SimWorker) -> bool:
        """Whether ``worker`` is cut off from the store now."""
        if self.cut_window is None or not self.chaos:
            return False
        generation, start, end = self.cut_window
        return worker.generation == generation and start <= self.now < end

    def store_trouble(self, runner: SimRunner) -> None:
        """``runner``'s store just failed or answered slowly: its leases may lapse."""
        self.troubled_at[runner.worker.generation] = self.now

    def store_work_waited(self, runner: SimRunner, waited: float) -> None:
        """The runner's own store work never waits long for a thread while its store
        works: nothing else (a hook that blocks, say) may hold the store's threads."""
        troubled = self.troubled_at.get(runner.worker.generation, float("-inf"))
        if waited > STORE_WAIT_LIMIT and troubled < self.now - waited - LEASE_SECONDS:
            raise Violation(
                f"seed {self.seed}: {runner._core.owner}'s store work waited {waited:.2f} s "
                "for a thread while its store answered at once"
            )

    def store_now(self) -> float:
        """The store's clock (the database's, for PostgreSQL), which judges leases."""
        return STORE_EPOCH + self.now

    def _check_leases(self) -> None:
        """The lease of a call whose function runs (or whose result is being saved) on a
        live worker whose store works never lapses: the loop renews it in time, whatever
        else (hooks, functions) keeps its threads busy. A claim acknowledged late may
        have lapsed, but its function does not start until a renewal confirms it. The
        call is judged by the store's record and its attempt, not only by the core's own
        ``lease_held`` flag: a core that forgot it holds a lease must not escape."""
        if not self.chaos:
            return
        now = self.store_now()
        for worker in self.workers:
            if not worker.alive or worker.closed:
                continue
            core = worker.runner._core
            troubled = self.troubled_at.get(worker.generation, float("-inf"))
            for record in self.store.find(states=[CallState.STARTED]):
                expires = record.lease_expires_at
                call = core.calls.get(record.key)
                if (
                    record.owner == core.owner
                    and expires is not None
                    and expires < now
                    and call is not None
                    and (call.lease_held or call.attempts == record.attempts)
                    and call.phase in (Phase.RUNNING, Phase.SAVING)
                    and troubled < self.now - LEASE_SECONDS * 1.5
                ):
                    raise Violation(
                        f"seed {self.seed}: {core.owner} holds {record.key.call_id}, its "
                        f"store worked, yet its lease lapsed {now - expires:.2f} s ago"
                    )
        self.at(self.now + LEASE_CHECK_EVERY, self._check_leases)

    def started_attempts(self, key: CallKey) -> set[int]:
        """The attempts of ``key`` whose function some worker started."""
        return {
            attempt
            for worker in self.workers
            for started, attempt in worker.runner.started
            if started == key
        }

    def function_started(self, runner: SimRunner, key: CallKey, attempt: int) -> None:
        """A function starts only under a claim the store holds for its worker, for that
        attempt, on a lease the store's clock has not seen lapse (but an idempotent one
        handed to its thread as its first claim was sent); and never for a Turn whose
        cancel had reached the worker's loop when it handed the call to a thread."""
        record = self.store.get(key)
        owner = runner._core.owner
        if self.cut is not None and self.cut_window is None:
            generation, armed, lasting = self.cut
            if runner.worker.generation == generation and self.now >= armed:
                self.cut_window = (generation, self.now, self.now + lasting)
        held_here = not (
            record is None
            or record.state is not CallState.STARTED
            or record.owner != owner
            or record.attempts != attempt
            or record.lease_expires_at is None
            or record.lease_expires_at <= self.store_now()
        )
        if not held_here and (key, attempt) in runner.sent_with_claim:
            # The idempotent fast path: it starts as its claim is sent. Its outcome is
            # posted only if the claim is won (checked as results are posted).
            self.early_runs.append(EarlyRun(owner, key))
        elif not held_here:
            held = "no record"
            if record is not None:
                lease = record.lease_expires_at
                left = "none" if lease is None else f"{lease - self.store_now():+.2f} s"
                held = (
                    f"{record.state.value}, owner {record.owner}, attempt {record.attempts}, "
                    f"lease {left}"
                )
            self.broken = Violation(
                f"seed {self.seed}: {owner} started {key.call_id} (attempt {attempt}) "
                f"although the store holds: {held}"
            )
            return
        turn = self.server.sessions[key.session_id].turn(key.turn_id)
        assert turn is not None
        known = runner.known_at_dispatch.get(key, float("-inf"))
        if turn.cancelled_at is not None and turn.cancelled_at <= known:
            self.broken = Violation(
                f"seed {self.seed}: {owner} started {key.call_id} although the cancel of "
                f"{turn.id} ({turn.cancelled_at:.3f}) had reached its loop ({known:.3f})"
            )

    def declines(self, key: CallKey) -> bool:
        """Whether the function of ``key`` raises (every time it runs)."""
        return self.declining and zlib.crc32(f"{key.session_id} {key.call_id}".encode()) % 4 == 0

    def within_limit(self, runner: SimRunner, name: str, running: int) -> None:
        """A function never runs more often at once on one worker than its own
        ``max_concurrency`` allows, counting runs that outlived their timeout."""
        limit = self.limits.get(name)
        if limit is not None and running > limit and self.broken is None:
            self.broken = Violation(
                f"seed {self.seed}: {runner._core.owner} runs {running} calls of {name} at "
                f"once (max_concurrency={limit})"
            )

    def check_context(self, runner: SimRunner, ctx: CallContext, name: str, order: str) -> None:
        """A function runs as the call asked: its own function, with the call's
        arguments, its identity in ``current_call()``, an idempotency key of its own (the
        same on every attempt and worker) and a deadline of its timeout."""
        key = CallKey(ctx.session_id, ctx.turn_id, ctx.call_id)
        call = self.server.call(key)
        assert call is not None
        problems = []
        if name != call.name or ctx.function_name != call.name:
            problems.append(f"{name} ran as {ctx.function_name} for a call of {call.name}")
        if f"{name}d {order}" != produced(call.name, call.arguments):
            problems.append(f"ran with {order!r}, not the arguments {call.arguments}")
        first = self.context_keys.setdefault(key, ctx.idempotency_key)
        owner = self.context_key_owners.setdefault(ctx.idempotency_key, key)
        if first != ctx.idempotency_key or owner != key or not 0 < len(first) <= 128:
            problems.append(f"its idempotency key {ctx.idempotency_key!r} is not its own")
        left = None if ctx.deadline is None else ctx.deadline - runner.worker.clock()
        if (left is None) != (self.timeout is None) or (
            left is not None and self.timeout is not None and not 0 < left <= self.timeout
        ):
            problems.append(f"its deadline is {left} s away with a timeout of {self.timeout}")
        if problems and self.broken is None:
            self.broken = Violation(f"seed {self.seed}: {key.call_id}: " + "; ".join(problems))

    def check_notes(self, runner: SimRunner, notes: list[Note]) -> None:
        """The notes a round leaves for logs, traces and metrics say what happened: a
        call started under this worker's claim of that attempt (or, for an idempotent
        function, as its first claim was sent); a call settled as
        submitted or applied has its saved result on the server; one settled as
        rejected, in conflict or abandoned was refused so (or its Turn cancelled)."""
        owner, server = runner._core.owner, self.server
        for note in notes:
            if isinstance(note, LogNote):
                self._check_log_note(runner, note)
                continue
            key = note.key
            call = server.call(key)
            record = self.store.get(key)
            refused = server.refused.get(key, set())
            held = server.sessions[key.session_id].results.get(key.call_id)
            turn = server.sessions[key.session_id].turn(key.turn_id)
            # A call whose ids the store cannot hold has its failure posted unsaved.
            unsaved = _Unsaved(held if key in self.unstorable else None)
            wrong = call is None or note.function_name != call.name
            if isinstance(note, CallStarted):
                core_call = runner._core.calls.get(key)
                early = core_call is not None and core_call.claim_unanswered
                wrong = wrong or (
                    not (early and note.attempt == 1)  # an idempotent fast path's
                    and (
                        record is None
                        or (record.state, record.owner, record.attempts)
                        != (CallState.STARTED, owner, note.attempt)
                    )
                )
            elif isinstance(note, CallSettled):
                outcome = note.outcome
                wrong = (
                    wrong
                    or outcome not in _OUTCOMES
                    or (
                        outcome in ("submitted", "applied")
                        and (held is None or held != (record or unsaved).result)
                        and held not in self.posted_ahead.get(key, ())
                    )
                    or (outcome == "rejected" and not refused & REFUSED_FOR_GOOD)
                    or (outcome == "session_gone" and not self.gone(key.session_id))
                    or (outcome == "conflict" and not refused & {"different", "reused"})
                    or (
                        outcome == "abandoned"
                        and "cancelled" not in refused
                        and (turn is None or turn.status != "cancelled")
                    )
                )
            if wrong and self.broken is None:
                self.broken = Violation(
                    f"seed {self.seed}: {owner} noted {note}, but the store holds {record} and "
                    f"the server {'holds' if held else 'has no'} result ({sorted(refused)})"
                )

    def _check_log_note(self, runner: SimRunner, note: LogNote) -> None:
        """A line the core leaves for the log can be logged: a standard level, and a
        message its arguments format (logging would otherwise print a traceback to
        stderr and lose the line, or show the bare ``%s``). It names what it is about
        (docs/operations.md: the function, the call and the Session): every argument of
        the core's lines is an id, a name, a count, a delay or an error, so none is
        ``None``. Its wording is a unit test's job."""
        problem = None
        if not isinstance(note.level, int) or note.level not in _LOG_LEVELS:
            problem = f"the level {note.level!r}"
        elif not isinstance(note.message, str):
            problem = f"the message {note.message!r}"
        elif note.args:
            try:
                note.message % note.args
            except (TypeError, ValueError) as exc:
                problem = f"arguments that do not format ({exc})"
            if problem is None and any(arg is None for arg in note.args):
                problem = "an argument that names nothing (None)"
        elif _CONVERSION.search(note.message):
            problem = "a conversion and no arguments"
        if problem is not None and self.broken is None:
            self.broken = Violation(
                f"seed {self.seed}: {runner._core.owner} left a log line with {problem}: "
                f"{note.message!r} % {note.args!r}"
            )

    def deadline_less_serve(self, worker: SimWorker, began: float) -> None:
        """A serve with no deadline began: against a server that fails every request,
        it must end by ``unreachable_timeout`` (plus a reconnect delay and a request)."""
        if self.outage is None:
            return
        start, end, _ = self.outage
        due = max(start, began) + GIVE_UP_WITHIN
        if due > min(end, CHAOS_ENDS):
            return
        serving = worker.deadline_less
        serving.add(began)

        def look() -> None:
            if worker.alive and began in serving:
                raise Violation(
                    f"seed {self.seed}: a serve with no deadline (begun at {began:.2f}) ran "
                    f"on {GIVE_UP_WITHIN:g} s into an outage of the server"
                )

        self.at(due, look)

    def _operator_looks(self) -> None:
        """A person runs ``calls resolve`` now and then, while workers run: on a call in
        doubt, a result by hand or a rerun; on a refused result, an answer."""
        if not self.chaos:
            return
        store, rng = self.store, self.operator
        settleable = [
            record
            for record in store.find()
            if record.state is CallState.REJECTED
            or (record.state is CallState.IN_DOUBT and record.settled_by != MANUAL_RERUN)
            or store.is_stale(record)
        ]
        if settleable:
            record = rng.choice(settleable)
            if record.state is CallState.REJECTED:
                self._resolve_by_hand(record, rng.choice(("output", "failed")))
            else:
                self._resolve_by_hand(record, rng.choice(("output", "failed", "rerun")))
        self.at(self.now + rng.expovariate(self.operator_rate), self._operator_looks)

    def _resolve_by_hand(self, record: CallRecord, kind: str) -> None:
        """``calls resolve`` as the command runs it (:func:`resolve_call`): a result or a
        rerun for a call in doubt; for a refused result, an answer sent to the server,
        then the record settled (it keeps the refused result)."""
        key = record.key
        answering = record.state is CallState.REJECTED
        try:
            resolution = resolve_call(
                self.store, key, client=_OperatorClient(self.server), **_BY_HAND[kind]
            )
        except (APIError, InvalidTransitionError):
            return  # the server or a worker was first: the command says so, nothing changed
        settled = resolution.record
        if answering and (
            settled.state is not CallState.ABANDONED or settled.settled_by != f"manual:{kind}"
        ):
            return  # a worker settled it first
        decided = "answer" if answering else kind
        self.decisions[key] = Decision(
            decided, settled.attempts, resolution.answer, self.runs[key], self.crashes
        )
        if kind == "rerun":
            self.reruns_by_hand[key] += 1

    def start_worker(self, *, drives: str | None = None, final: bool = False) -> SimWorker:
        """A worker that serves every Session until idle, or drives Turns of ``drives``
        (a Session no other worker sends input to); the final one does both."""
        worker = SimWorker(self, next(self.generation))
        self.workers.append(worker)
        if final:
            worker.finish_everything()
        elif drives is not None:
            worker.spawn_loop(worker.drive_turns(drives))
        else:
            for session_id in self.served + self.driven:
                worker.spawn_loop(worker.serve_until_idle(session_id))
        return worker

    def check(self) -> None:
        """The runner's promises, over every crash and worker of this history."""
        for (generation, second), count in self.server.failing_requests.items():
            if count > FAILING_SERVER_RATE:
                raise Violation(
                    f"seed {self.seed}: worker {generation} sent {count} requests in second "
                    f"{second} to a server failing every request (at most "
                    f"{FAILING_SERVER_RATE})"
                )
        reported: set[CallKey] = set()
        self._check_reports()
        self._check_marks()
        self._check_actions_told()
        for _, report in self.reports:
            reported.update(report.rejected, report.conflicts, report.in_doubt, report.abandoned)
        for session in self.server.sessions.values():
            for call in session.announced:
                call_id = call.key.call_id
                runs = self.runs[call.key]
                # A charge runs once, unless its hook asks to rerun it (capped as well).
                rerun = call.name == "reserve" or self.in_doubt_hook == "rerun"
                limit = MAX_ATTEMPTS if rerun else 1
                limit += self.reruns_by_hand[call.key]
                # An idempotent run started as its claim was sent, by a worker never
                # granted the claim (lost, or killed before the store held it), is one
                # run more than the record counts, and its outcome was dropped: these
                # checks count the runs that could have been answered.
                runs -= self.unclaimed_runs(call.key)
                if runs > limit:
                    raise Violation(
                        f"seed {self.seed}: {call.name} {call_id} ran {runs} times (limit {limit})"
                    )
                accepted = session.results.get(call_id)
                if call.key in self.unstorable:
                    if runs:
                        raise Violation(f"seed {self.seed}: unrecordable {call_id} ran")
                    continue
                record = self.store.get(call.key)
                if record is not None and record.late_outcome is not None:
                    self._check_late(call, runs, record)
                if record is not None and call.key in self.decisions:
                    self._check_decision(record, self.decisions[call.key])
                if accepted is None:
                    turn = session.turn(call.key.turn_id)
                    assert turn is not None
                    if (
                        call_id in turn.pending
                        and call.key not in reported
                        and session.deleted_at is None
                    ):
                        raise Violation(
                            f"seed {self.seed}: {call_id} is still pending and nobody reported it"
                        )
                    continue
                decision = self.decisions.get(call.key)
                if decision is not None and decision.kind == "answer":
                    saved = None if record is None else record.result
                    if accepted not in (decision.event, saved):
                        raise Violation(
                            f"seed {self.seed}: the server holds a result for {call_id} that "
                            "is neither the person's answer nor the saved one"
                        )
                    continue
                if accepted in self.posted_ahead.get(call.key, ()):
                    # Posted as it was saved, by a worker granted the claim: the save
                    # found another result first, or never landed (a crash).
                    continue
                if record is None or record.result != accepted:
                    raise Violation(
                        f"seed {self.seed}: the server holds a result for {call_id} that differs "
                        "from the saved one"
                    )
                if not accepted["success"]:
                    self._check_failure(call, accepted["error"], runs)
                if accepted["success"] and accepted.get("output", "").startswith(call.name):
                    if runs < 1:
                        raise Violation(f"seed {self.seed}: {call_id} succeeded without running")
                    if accepted["output"] != produced(call.name, call.arguments):
                        raise Violation(
                            f"seed {self.seed}: {call_id} was answered {accepted['output']!r}, "
                            "which its function did not return"
                        )
                elif (
                    not accepted["success"]
                    and accepted["error"] == IN_DOUBT_ERROR
                    and rerun
                    and record.attempts < MAX_ATTEMPTS
                ):
                    raise Violation(
                        f"seed {self.seed}: {call_id}, to be rerun, failed in doubt after "
                        f"{record.attempts} attempts"
                    )

    def unclaimed_runs(self, key: CallKey) -> int:
        """Runs of ``key``'s (idempotent) function started as their claim was sent by
        workers the store never granted it: their outcome was never to be posted."""
        return sum(1 for run in self.early_runs if run.key == key and not run.granted)

    def claim_granted(self, owner: str, key: CallKey) -> None:
        """The store granted ``owner`` its first claim of ``key``: the latest run it
        started as that claim was sent (if it started one) ran under it."""
        self.granted.add((owner, key, 1))
        for run in reversed(self.early_runs):
            if (run.owner, run.key) == (owner, key):
                run.granted = True
                return

    def _check_failure(self, call: ServerCall, error: str, runs: int) -> None:
        """A call fails as served by no function only when a worker that lacks it was
        told to fail such calls, and never after its function ran. (What the in-doubt
        policy answers is checked as it is saved, in ``_audit``.)"""
        if not error.startswith("No function named"):
            return
        failing = any(
            worker.runner.lacks == call.name and worker.runner.unknown == "fail"
            for worker in self.workers
        )
        if runs or not failing:
            raise Violation(
                f"seed {self.seed}: {call.key.call_id} failed as served by no function "
                f"({runs} runs); no worker that lacks {call.name} was told to fail its calls"
            )

    def _check_actions_told(self) -> None:
        """The fault-free worker's ``on_action`` hook was told of every action other
        than a function call that a Session snapshot its pump took required (the
        hooks' calls check that each is true and told once)."""
        server, final = self.server, self.workers[-1].generation
        if self.other_actions is None:
            return
        missed = server.actions_shown.get(final, set()) - server.actions_told.get(final, set())
        if missed:
            action, session_id = server.other_actions[min(missed)]
            raise Violation(
                f"seed {self.seed}: the final worker saw Session {session_id} require "
                f"{action!r}, and its on_action hook was never told"
            )

    def _check_reports(self) -> None:
        """What each ``ServeReport`` says happened, happened: a call is reported refused,
        in conflict or abandoned only if the server said so (or its Turn was
        cancelled), in doubt only if its record was; counts stay within what its worker
        did; and the fault-free worker reports no fault."""
        server, final = self.server, self.workers[-1].generation
        for generation, report in self.reports:
            where = f"seed {self.seed}: sim-{generation}'s report on {report.session_id}"
            for key in report.rejected:
                if not server.refused.get(key, set()) & REFUSED_FOR_GOOD:
                    raise Violation(f"{where} lists {key.call_id} rejected; it was never refused")
            for key in report.conflicts:
                if not server.refused.get(key, set()) & {"different", "reused"}:
                    raise Violation(
                        f"{where} lists {key.call_id} in conflict; the server never held another"
                    )
            for key in report.abandoned:
                turn = server.sessions[key.session_id].turn(key.turn_id)
                assert turn is not None
                if turn.status != "cancelled" and "cancelled" not in server.refused.get(key, ()):
                    raise Violation(f"{where} lists {key.call_id} abandoned; its Turn takes it")
            lacks = {worker.generation: worker.runner.lacks for worker in self.workers}
            for key in report.in_doubt:
                record, call = self.store.get(key), server.call(key)
                # A worker that cannot run a call may find its claim stale, not yet marked.
                stale = call is not None and call.name == lacks[generation]
                if record is None or (record.in_doubt_at is None and not stale):
                    raise Violation(f"{where} lists {key.call_id} in doubt; its record never was")
            if report.left_pending and lacks[generation] is None:
                raise Violation(f"{where} left {report.left_pending} pending; it serves them all")
            runs = sum(
                worker.runner.runs_by_session[report.session_id]
                for worker in self.workers
                if worker.generation == generation
            )
            submitted = server.accepted_from.get((generation, report.session_id), 0)
            counts = (
                report.calls_run,
                report.function_errors,
                report.results_submitted,
                report.results_resubmitted,
                report.duplicates_skipped,
                report.reconnects,
                report.store_errors,
            )
            if (
                min(counts) < 0
                or report.calls_run > runs
                or report.function_errors > report.calls_run
                or report.results_submitted > submitted
            ):
                raise Violation(
                    f"{where} counts {counts}; its worker ran {runs} functions of that Session "
                    f"and the server accepted {submitted} of its results"
                )
            if generation == final and (report.reconnects or report.store_errors):
                raise Violation(f"{where} counts faults after every fault ended: {counts}")
            if generation == final and report.session_id in self.served:
                # docs/operations.md: report.in_doubt lists the calls found in doubt.
                missed = {
                    key
                    for found_by, key in self.found_in_doubt
                    if found_by == final and key.session_id == report.session_id
                } - set(report.in_doubt)
                if missed:
                    raise Violation(
                        f"{where} leaves out {sorted(key.call_id for key in missed)}, which "
                        "it found in doubt"
                    )

    def _check_marks(self) -> None:
        """A record's state tells the truth: ``submitted`` and ``applied`` results are
        the ones the server holds, ``rejected`` ones were refused, ``abandoned`` ones the
        server does not hold; and the fault-free worker leaves every result it posted
        marked (its serves return after writing their marks; ``applied`` only if it saw
        the output Item before its serve ended)."""
        server, final = self.server, self.workers[-1].generation
        for record in self.store.find():
            key, state = record.key, record.state
            held = server.sessions[key.session_id].results.get(key.call_id)
            where = f"seed {self.seed}: {key.call_id} is {state.value}"
            if state in (CallState.SUBMITTED, CallState.APPLIED) and held != record.result:
                raise Violation(f"{where}, but the server holds {held}")
            if (
                state is CallState.REJECTED
                and not server.refused.get(key, set()) & REFUSED_FOR_GOOD
            ):
                raise Violation(f"{where}, but the server never refused its result")
            if (
                state is CallState.ABANDONED
                and not (record.settled_by or "").startswith("manual:")
                and held == record.result
            ):
                raise Violation(f"{where}, but the server took its result")
            if key in server.accepted_keys.get(final, ()) and state not in (
                CallState.SUBMITTED,
                CallState.APPLIED,
            ):
                raise Violation(f"{where}, although the fault-free worker posted its result")

    def _check_decision(self, record: CallRecord, decision: Decision) -> None:
        """A person's decision stands: a result by hand is the saved one, and a rerun is
        not answered by a runner's policy unless a later attempt ran and was lost."""
        call_id = record.key.call_id
        if decision.kind == "answer":
            if record.state is not CallState.ABANDONED:
                raise Violation(
                    f"seed {self.seed}: {call_id} was answered by hand, but its record is "
                    f"{record.state.value}, not settled"
                )
            return
        if decision.event is not None and record.result != decision.event:
            raise Violation(
                f"seed {self.seed}: {call_id} was settled by hand, but the store holds "
                f"another result: {record.result}"
            )
        if decision.kind != "rerun" or record.result is None:
            return
        result = record.result
        by_policy = (
            result["success"] is False
            and result.get("error") in (IN_DOUBT_ERROR, FAILED_BY_THE_APPLICATION)
        ) or (result["success"] is True and result.get("output") == CHECKED_BY_THE_APPLICATION)
        if by_policy and record.attempts == decision.attempts:
            raise Violation(
                f"seed {self.seed}: {call_id} was cleared to run again by hand, but a "
                f"runner's in-doubt policy answered it with no new attempt: {record.result}"
            )
        if by_policy and (self.runs[record.key], self.crashes) == (
            decision.runs,
            decision.crashes,
        ):
            # Only a worker killed after taking the call over (its function may or may
            # not have started) lets the policy answer a call cleared to run again.
            raise Violation(
                f"seed {self.seed}: {call_id} was cleared to run again by hand, but a "
                "runner's in-doubt policy answered it although its function never ran and "
                f"no worker crashed: {record.result}"
            )

    def _check_late(self, call: ServerCall, runs: int, record: CallRecord) -> None:
        """A late outcome is what a function produced after its result was settled: it
        ran past its timeout, or another worker's in-doubt verdict was saved first (its
        lease had lapsed while the store failed it; the saved result is that verdict)."""
        late = record.late_outcome
        assert late is not None
        own = late.get("success") is True and late.get("output") == produced(
            call.name, call.arguments
        )
        raised = (
            late.get("success") is False
            and late.get("error") == INTERNAL_ERROR
            and self.declines(call.key)
        )
        ended = late.get("success") is False and late.get("error") == ENDED_WITHOUT_RESULT
        timed_out = self.timeout is not None and (own or raised or ended)
        lost_race = (own or raised) and record.result != late
        if runs < 1 or not (timed_out or lost_race):
            raise Violation(
                f"seed {self.seed}: {call.key.call_id} (timeout {self.timeout}, {runs} runs) "
                f"kept a late outcome its function did not produce: {late}, beside {record.result}"
            )


@dataclass
class _StoppedServe:
    """A ``serve(until="forever")`` that ``stop()`` must end."""

    session_id: str
    stopped_at: float | None = None
    #: When it must have returned by, as far as the watch has seen.
    due: float = float("-inf")
    returned: bool = False


@dataclass(frozen=True)
class _Unsaved:
    result: dict[str, Any] | None


class _OperatorClient:
    """The client the operator's ``calls resolve`` talks through: the simulated server
    (``sessions.events.create`` is its ``accept``, for a person's answer)."""

    def __init__(self, server: Server) -> None:
        self._server = server

    @property
    def sessions(self) -> _OperatorClient:
        return self

    @property
    def events(self) -> _OperatorClient:
        return self

    def create(
        self, session_id: str, *, events: Iterable[Mapping[str, Any]], idempotency_key: str
    ) -> None:
        self._server.accept(session_id, list(events), idempotency_key, by_hand=True)


class SimWorker:
    """One runner process: its own clock, its runner, and the coroutines it runs."""

    def __init__(self, world: World, generation: int) -> None:
        self.world = world
        self.generation = generation
        self.alive = True
        #: Workers' clocks disagree: leases must be judged by the store's clock alone.
        self.skew = world.rng.uniform(-1000.0, 1000.0)
        self.rate = world.rng.uniform(0.98, 1.02)
        self.forcing = random.Random(f"force {world.seed} {generation}")
        self.runner = SimRunner(self)
        self.tasks: list[Task] = []
        #: The application's loops (serving, driving Turns) still running.
        self.loops = 0
        #: When each serve with no deadline that must end in an outage began.
        self.deadline_less: set[float] = set()
        #: Whether the application is closing this worker's runner, and has closed it.
        self.closing = False
        self.closed = False
        #: When the serve with no deadline of each Session began, while it runs.
        self.deadline_less_of: dict[str, float] = {}

    def clock(self) -> float:
        """This worker's monotonic clock: its own origin, and a rate a little off."""
        return self.skew + self.world.now * self.rate

    def at_clock(self, when: float, action: Callable[[], None]) -> None:
        """Run ``action`` when this worker's clock reads ``when``."""
        self.world.at((when - self.skew) / self.rate, action)

    def spawn(
        self,
        coroutine: Coroutine[Any, Any, Any],
        on_done: Callable[[Any, BaseException | None], None] | None = None,
    ) -> Task:
        self.tasks = [task for task in self.tasks if not task.done()]
        task = Task(self.world, self, coroutine)
        self.tasks.append(task)
        if on_done is not None:
            task.add_done_callback(
                lambda finished: on_done(
                    None if finished.exception() else finished.result(),
                    finished.exception(),
                )
            )
        return task

    def spawn_loop(self, loop: Coroutine[Any, Any, None]) -> None:
        """One of the application's loops; it may end only by returning."""

        def done(_: None, error: BaseException | None) -> None:
            self.loops -= 1
            if error is not None:
                raise Violation(f"seed {self.world.seed}: a runner call raised {error!r}")

        self.loops += 1
        self.spawn(loop, done)

    def finished(self) -> bool:
        return self.loops == 0

    async def sleep(self, low: float, high: float) -> None:
        woken: SimFuture[None] = SimFuture()
        self.world.later(low, high, lambda: woken.set_result(None))
        await woken

    def crash(self) -> None:
        if self.alive:
            self.alive = False
            self.world.crashes += 1
            self.world.reports.extend(
                (self.generation, serve.report) for serve in self.runner._core.serves.values()
            )
            for task in self.tasks:
                task.end()
            for task in self.tasks:
                task.kill()

    # -- what the application does with its runner -----------------------------------------

    def _returned_in_time(self, began: float, timeout: float, what: str) -> None:
        """A call with ``timeout`` returns by then, plus the grace for running calls."""
        limit = began + (timeout + self.runner.shutdown_grace) / self.rate + 0.01
        if self.world.now > limit:
            raise Violation(
                f"seed {self.world.seed}: {what} returned {self.world.now - limit:.3f} s "
                "after its deadline and grace"
            )

    async def serve_until_idle(self, session_id: str) -> None:
        world, runner = self.world, self.runner
        while world.chaos and not self.closing:
            timeout: float | None = world.rng.uniform(0.5, 4.0)
            began, draw = world.now, world.rng.random()
            try:
                if draw < 0.2:
                    await runner.recover(session_id, timeout=timeout)
                elif draw < 0.3:
                    timeout = None
                    world.deadline_less_serve(self, began)
                    self.deadline_less_of[session_id] = began
                    await runner.serve(session_id, until="idle")
                elif draw < 0.45:
                    # As a production worker serves: until stop(), past idle Sessions.
                    timeout = None
                    self.deadline_less_of[session_id] = began
                    stopping = _StoppedServe(session_id)
                    world.later(1.0, 4.0, functools.partial(self._stop_serving, stopping))
                    try:
                        await runner.serve(session_id, until="forever")
                    finally:
                        stopping.returned = True
                else:
                    await runner.serve(session_id, until="idle", timeout=timeout)
            except (RunnerError, APIError) as error:
                if self._told_gone(session_id, error):
                    return  # as the error says: stop serving it
                self._gave_up_in_time(began, session_id, error, forever=0.3 <= draw < 0.45)
            except ServeTimeout:
                pass
            finally:
                self.deadline_less.discard(began)
                self.deadline_less_of.pop(session_id, None)
            if timeout is not None:
                self._returned_in_time(began, timeout, f"serving {session_id}")
            await self.sleep(0.05, 0.5)

    def _told_gone(self, session_id: str, error: Exception) -> bool:
        """A serve of a deleted Session ends with an error that says the Session no
        longer exists (not that ``base_url`` is wrong); no other serve says so."""
        says_gone = isinstance(error, RunnerError) and "no longer exists" in str(error)
        gone = self.world.gone(session_id)
        deleted = gone and isinstance(error.__cause__, NotFoundError)
        if says_gone != deleted:
            raise Violation(
                f"seed {self.world.seed}: serving {session_id} "
                f"({'deleted' if gone else 'not deleted'}) ended with {error!r}"
            )
        return says_gone

    def _gave_up_in_time(
        self, began: float, session_id: str, error: Exception, *, forever: bool = False
    ) -> None:
        """A serve gives up on a server that fails every request only once it failed
        for ``unreachable_timeout`` (docs/operations.md), never sooner, with an error
        that names the server's URL; ``serve(until="forever")`` never gives up."""
        cause = error.__cause__ if isinstance(error, RunnerError) else error
        failing = (InternalServerError, APIResponseValidationError, APIConnectionError)
        if not isinstance(cause, failing):
            return  # a redirect ends a serve at once, as it should
        world = self.world
        if forever or str(SimClient.base_url.copy_with(path="/")) not in str(error):
            raise Violation(
                f"seed {world.seed}: a serve{' until forever' if forever else ''} gave up "
                f"on a failing server with {error!r}"
            )
        # The runner counts from the first failure it saw, on this serve or before it
        # (a run of failures only a read of the Session that succeeds ends).
        since = min(began, self.runner.failing_since.get(session_id, began))
        if world.outage is not None:
            since = min(since, world.outage[0])
        served = (world.now - since) * self.rate
        if served < UNREACHABLE_TIMEOUT:
            raise Violation(
                f"seed {world.seed}: a serve gave up on the server after {served:.2f} s "
                f"(unreachable_timeout {UNREACHABLE_TIMEOUT:g} s): {error!r}"
            )

    def _stop_serving(self, stopping: _StoppedServe) -> None:
        """``stop()``, or in some histories ``stop(force=True)``: running functions are
        told to stop too (drawn apart, so that other histories replay as they did)."""
        if self.alive and not stopping.returned:
            stopping.stopped_at = self.world.now
            self.runner.stop(force=self.forcing.random() < 0.5)
            self._returns_when_stopped(stopping)

    def _returns_when_stopped(self, stopping: _StoppedServe) -> None:
        """A stopped serve returns once the calls it had in flight are done: within
        ``STOP_LIMIT`` (and the grace for running functions) of the last of them
        running, or waiting for a slot or a hook, while the server and the store work
        (or that long after the store's next retry). Watched from outside, as a serve
        that never returns runs into the end of the chaos. (It once waited for the
        runner's clock to pass zero: a claim that failed in the store put its Session's
        next read at ``max(read_at or 0.0, retry)``.)"""
        world = self.world
        stopped_at = stopping.stopped_at
        assert stopped_at is not None
        if stopping.returned or not self.alive or world.failed_between(stopped_at, world.now):
            return  # a serve that must end gives up on a failing server (checked above)
        allowed = (STOP_LIMIT + self.runner.shutdown_grace) / self.rate
        due = max(stopped_at + allowed, stopping.due)
        if self._still_running(stopping.session_id):
            due = max(due, world.now + allowed)
        troubled = world.troubled_at.get(self.generation, float("-inf"))
        if troubled >= stopped_at - STORE_RETRY_MAX_DELAY:
            due = max(due, troubled + STORE_RETRY_MAX_DELAY / self.rate + allowed)
        stopping.due = due
        if world.now < due:
            recheck = functools.partial(self._returns_when_stopped, stopping)
            world.at(min(due, world.now + STOP_WATCH_EVERY), recheck)
            return
        raise Violation(
            f"seed {world.seed}: a serve of {stopping.session_id} stopped at "
            f"{stopped_at:.2f} s has not returned {world.now - stopped_at:.2f} s later, "
            "while the server and the store work"
        )

    def _still_running(self, session_id: str) -> bool:
        """Whether a call a stopped serve of ``session_id`` waits for still runs, or
        waits for a slot, for its ``on_in_doubt`` hook or for a failed POST's backoff:
        those take what they take."""
        core = self.runner._core
        waits_for: set[CallKey] = set()
        for serve in core.serves.values():
            if serve.session_id == session_id and serve.stopping:
                waits_for |= serve.finishing
        working = (Phase.WAITING, Phase.QUEUED, Phase.RUNNING, Phase.DECIDING, Phase.BACKOFF)
        return any(
            (call := core.calls.get(key)) is not None and call.phase in working for key in waits_for
        )

    async def drive_turns(self, session_id: str) -> None:
        """Input after input on a Session no other client sends input to."""
        world, runner = self.world, self.runner
        while world.chaos and not self.closing:
            timeout, began = world.rng.uniform(0.3, 4.0), world.now
            try:
                result = await runner.run_turn(session_id, "Go on.", timeout=timeout)
            except (ServeTimeout, APIError):
                pass
            except RunnerError as error:
                # Only a server that kept failing may end it so (every admitted input
                # shows a Turn): its stream, its reads or its posts were given up on.
                if not (
                    world.failed_between(began, world.now)
                    or isinstance(error.__cause__, APIError)
                    or self.closing  # closed before its Turn ended, past the grace
                ):
                    raise
            else:
                if not self.closing:  # close() stops it: it returns the Turn as it was
                    world.server.check_turn_result(result)
            self._returned_in_time(began, timeout, f"run_turn on {session_id}")
            await self.sleep(0.0, 0.5)

    def start_closing(self) -> None:
        if self.alive:
            self.spawn_loop(self.close())

    async def close(self) -> None:
        """``close()`` returns within its grace, and the store is final when it returns
        before the grace ran out: every result the server took from this worker is
        marked ``submitted`` or ``applied``, none is left plain ``completed``."""
        world, runner = self.world, self.runner
        began = world.now
        self.closing = True
        await runner.close()
        self.closed = True  # its pump has stopped: it renews no lease any more
        self._returned_in_time(began, 0.0, "close()")
        if world.now >= began + runner.shutdown_grace / self.rate - 0.01:
            return  # out of grace: what is left is a restarted runner's to settle
        for key in world.server.accepted_keys.get(self.generation, ()):
            record = world.store.get(key)
            if record is not None and record.state is CallState.COMPLETED:
                raise Violation(
                    f"seed {world.seed}: sim-{self.generation}'s close() returned before its "
                    f"grace ran out, and left {key.call_id}, whose result the server took "
                    "from it, unmarked"
                )

    def finish_everything(self) -> None:
        """The final worker: no faults, so every call must settle and every Turn end;
        it drives Turns of every driven Session, and of a fresh one."""
        world = self.world
        fresh = world.server.add_session("sess_final").id
        for session_id in world.served + world.driven:
            if not world.gone(session_id):
                self.spawn_loop(self._settle(session_id))
        for session_id in [*world.driven, fresh]:
            self.spawn_loop(self._final_turns(session_id))

    async def _settle(self, session_id: str) -> None:
        began = self.world.now
        try:
            report = await self.runner.serve(session_id, until="idle", timeout=FINAL_TIMEOUT)
        except ServeTimeout:
            raise Violation(
                f"seed {self.world.seed}: the final serve of {session_id} did not settle "
                f"within {FINAL_TIMEOUT:g} s"
            ) from None
        if session_id in self.world.served:
            self._settled_when_idle(session_id, report)
            self._counted_exactly(session_id, report)
            self._returned_once_settled(session_id, began)

    def _returned_once_settled(self, session_id: str, began: float) -> None:
        """With no faults, ``serve(until="idle")`` returns soon after its Session last
        changed (``SETTLED_RETURN_WITHIN``); it waits for nothing of other Sessions."""
        world = self.world
        settled = max(began, world.server.sessions[session_id].changed_at)
        if world.now - settled > SETTLED_RETURN_WITHIN:
            raise Violation(
                f"seed {world.seed}: the final serve of {session_id} returned "
                f"{world.now - settled:.2f} s after its Session last changed"
            )

    def _counted_exactly(self, session_id: str, report: ServeReport) -> None:
        """The fault-free worker's one serve of a served Session reports exactly what
        it did there: every function it ran (each attempt once), those that failed
        (raised, or timed out: bounded then, as a late end may not have counted), and
        every result the server took from it."""
        runner = self.runner
        ran = runner.runs_by_session[session_id]
        raised = len({run for run in runner.raised if run[0].session_id == session_id})
        taken = self.world.server.accepted_from.get((self.generation, session_id), 0)
        errors = report.function_errors
        if (
            report.calls_run != ran
            or report.results_submitted != taken
            or (errors != raised if self.world.timeout is None else errors < raised)
        ):
            raise Violation(
                f"seed {self.world.seed}: the final serve of {session_id} counts "
                f"{report.calls_run} calls run, {errors} failed and "
                f"{report.results_submitted} results submitted; its worker ran {ran} "
                f"({raised} raised) and the server took {taken} of its results"
            )

    def _settled_when_idle(self, session_id: str, report: ServeReport) -> None:
        """``serve(until="idle")`` returns once the Session is idle, or waits only on
        results the server refused (a person must answer them), and its report says
        the status it returned on. (A served Session takes no new input, so nothing
        changes it after its serve returns.)"""
        session = self.world.server.sessions[session_id]
        turn = session.active
        waiting = set() if turn is None else {call.key for call in turn.pending.values()}
        if waiting - set(report.rejected) or report.final_status != session.status:
            raise Violation(
                f"seed {self.world.seed}: the final serve of {session_id} returned "
                f"{report.final_status!r} while the Session is {session.status} and waits "
                f"on {sorted(key.call_id for key in waiting)}"
            )

    async def _final_turns(self, session_id: str) -> None:
        server = self.world.server
        for _ in range(self.world.rng.randint(1, 3)):
            try:
                result = await self.runner.run_turn(session_id, "Finish.", timeout=FINAL_TIMEOUT)
            except ServeTimeout:
                # Even a Turn that waits on a refused result must not be waited out:
                # run_turn returns it, not ended, with the call in report.rejected.
                raise Violation(
                    f"seed {self.world.seed}: the final run_turn on {session_id} did not "
                    f"return within {FINAL_TIMEOUT:g} s"
                ) from None
            if server.check_turn_result(result):
                return  # a person must look at a result the server refused


def run_seed(seed: int, *, mutate: Callable[[SimRunner], None] | None = None) -> World:
    """Run one seed's whole history and check it; raises :class:`Violation`."""
    world = World(seed, mutate=mutate)
    try:
        world.run()
    finally:
        for worker in world.workers:
            worker.crash()  # a history that broke a promise leaves no task waiting
    world.check()
    return world
