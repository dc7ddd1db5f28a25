"""The runner under test: the product's own driver loop on the simulated clock.

:class:`SimRunner` is :class:`~openagentcore.runner._driver.Driver`, the loop
``AsyncFunctionRunner`` runs: its pump, stream readers, waits, serve deadlines and
grace, reconnect and give-up policy, hook dispatch and effects are the library's code.
What it is given here are only the edges: a :class:`SimRuntime` (the worker's clock,
tasks stepped on virtual time, lanes of simulated threads that run the store, hooks
and functions after seeded delays, with faults), the store's I/O (a fault may refuse
or lose a store call), and a client whose requests reach the simulated server after
a seeded latency.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from openagentcore import APIConnectionError, APIError, APITimeoutError, NotFoundError
from openagentcore.runner import InDoubtCall, InDoubtDecision, current_call
from openagentcore.runner._context import CallContext
from openagentcore.runner._core import Phase, Serve
from openagentcore.runner._core_base import Mode
from openagentcore.runner._driver import Driver
from openagentcore.runner._effects import (
    AskInDoubt,
    ClaimCall,
    KeepLateOutcome,
    Lookup,
    LookupMany,
    MarkInDoubt,
    Note,
    Release,
    RenewLeases,
    ReportAction,
    RunFunction,
    SaveResult,
    StoreAnswer,
    StoreEffect,
    TakeOver,
    WriteMarks,
    perform_store,
)
from openagentcore.runner._housekeeping import STORE_RETRY_MAX_DELAY
from openagentcore.runner._pump import Message, Stop, ask_in_doubt, report_action
from openagentcore.runner._registry import RegisteredFunction, describe_function
from openagentcore.runner._runtime import HOOK_THREADS, Lane
from openagentcore.store import (
    CallKey,
    CallRecord,
    CallState,
    ResultStore,
    StoreKeyError,
    StoreUnavailableError,
)
from openagentcore.store._records import owner_closed
from openagentcore.types import RequiredAction, Session, SessionEvent, Turn

from ._server import REQUEST, Server
from ._tasks import SimFuture, Violation

if TYPE_CHECKING:
    from ._world import SimWorker, World

__all__ = [
    "CHECKED_BY_THE_APPLICATION",
    "FAILED_BY_THE_APPLICATION",
    "IN_DOUBT_HOOKS",
    "LEASE_SECONDS",
    "MAX_ATTEMPTS",
    "UNREACHABLE_TIMEOUT",
    "SimRunner",
    "SimStream",
]

LEASE_SECONDS = 1.0
MAX_ATTEMPTS = 3
#: How long a serve that must end keeps trying a server that fails every request.
UNREACHABLE_TIMEOUT = 2.0
T = TypeVar("T")


def _declared(order: str) -> str:
    """Charge or reserve an order (each worker registers a body that counts runs)."""
    raise NotImplementedError


#: Described once: describing a function inspects it and builds its JSON schema, which
#: would cost more than a whole history if every worker did it.
_FUNCTIONS = (
    describe_function(_declared, name="charge"),
    describe_function(_declared, name="reserve", idempotent=True, max_attempts=MAX_ATTEMPTS),
)


def _raising_hook(call: InDoubtCall) -> InDoubtDecision:
    raise RuntimeError("the application's hook is broken")


#: What ``_checking_hook`` answers for a call in doubt, without running it.
CHECKED_BY_THE_APPLICATION = "checked by the application"


def _checking_hook(call: InDoubtCall) -> InDoubtDecision:
    return InDoubtDecision.result(CHECKED_BY_THE_APPLICATION)


#: The error ``_failing_hook`` fails a call in doubt with (its own words, not the default).
FAILED_BY_THE_APPLICATION = "failed by the application: the charge may have gone through"


def _failing_hook(call: InDoubtCall) -> InDoubtDecision:
    return InDoubtDecision.fail(FAILED_BY_THE_APPLICATION)


def _rerunning_hook(call: InDoubtCall) -> InDoubtDecision:
    """Asks to run again: ``max_attempts`` (the default, for a charge) still caps it."""
    return InDoubtDecision.rerun()


def _unsendable_hook(call: InDoubtCall) -> InDoubtDecision:
    """Answers what no result can carry (a NUL in the output, a lone surrogate in the
    error text): the runner must fail the call as outcome unknown instead."""
    if sum(map(ord, call.key.call_id)) % 2:
        return InDoubtDecision.result("checked: \x00")
    return InDoubtDecision.fail("the charge \ud800 may have gone through")


#: The hooks a whole history's workers may share instead of their own draw, by name.
IN_DOUBT_HOOKS = {"fail": _failing_hook, "rerun": _rerunning_hook, "unsendable": _unsendable_hook}


class _Lane:
    """Simulated threads of one lane: work waits for a free one, as in a pool."""

    def __init__(self, threads: int) -> None:
        self.free = threads
        #: Work waiting for a thread, with the world time it was handed over.
        self.queue: deque[tuple[Callable[[], Any], SimFuture[Any], float]] = deque()


class SimInbox:
    """The pump's inbox on virtual time. What the pump drains is what it has seen."""

    def __init__(self, runtime: SimRuntime) -> None:
        self._runtime = runtime
        self._items: list[Message] = []
        self._waiter: SimFuture[None] | None = None

    def put(self, message: Message) -> None:
        if not self._runtime.worker.alive:
            return
        self._items.append(message)
        if self._waiter is not None:
            self._waiter.set_result(None)

    put_threadsafe = put

    async def drain(self, wait: float) -> list[Message]:
        runtime = self._runtime
        if not self._items:
            self._waiter = waiter = SimFuture[None]()
            if math.isfinite(wait):
                # At least a microsecond: converting between this worker's clock and
                # the world's can round a due time to just ahead of "now" for ever.
                world = runtime.world
                world.at(
                    world.now + max(wait / runtime.worker.rate, 1e-6),
                    lambda: waiter.set_result(None),
                )
            await waiter
            self._waiter = None
        items, self._items = self._items, []
        runtime.runner.seen(items)
        return items


class SimRuntime:
    """The edges of one worker's loop: its clock, its tasks and its threads."""

    def __init__(self, worker: SimWorker, runner: SimRunner) -> None:
        self.worker = worker
        self.world = world = worker.world
        self.runner = runner
        rng = world.rng
        #: Fewer store threads than a real runner has, so that a lane shared with
        #: work that blocks would starve lease renewals within a history.
        self.lanes = {
            Lane.STORE: _Lane(rng.choice((1, 2, 4))),
            Lane.HOOKS: _Lane(HOOK_THREADS),
            Lane.FUNCTIONS: _Lane(runner.max_concurrency),
        }

    def now(self) -> float:
        return self.worker.clock()

    def jitter(self) -> float:
        return self.world.rng.random()

    def future(self) -> SimFuture[Any]:
        return SimFuture()

    def inbox(self) -> SimInbox:
        return SimInbox(self)

    def _crashes(self) -> bool:
        """A worker may be killed before any effect starts."""
        world = self.world
        if self.worker.alive and world.chance(world.faults.crash):
            self.worker.crash()
        return not self.worker.alive

    def spawn(self, coroutine: Coroutine[Any, Any, T]) -> SimFuture[Any]:
        if self._crashes():
            coroutine.close()
            return SimFuture()
        return self.worker.spawn(coroutine)

    def offload(self, lane: Lane, work: Callable[[], T]) -> SimFuture[T]:
        future: SimFuture[T] = SimFuture()
        if self._crashes():
            return future
        if lane is Lane.FUNCTIONS:
            self.runner.dispatching(work)
        elif isinstance(work, functools.partial) and work.func is ask_in_doubt:
            self.runner.asking(work.args[1])
        threads = self.lanes[lane]
        threads.queue.append((work, future, self.world.now))
        self._dispatch(lane)
        return future

    def _dispatch(self, lane: Lane) -> None:
        threads = self.lanes[lane]
        while threads.free and threads.queue:
            threads.free -= 1
            work, future, handed = threads.queue.popleft()
            if lane is Lane.STORE:
                self.world.store_work_waited(self.runner, self.world.now - handed)
            self.world.later(0.0005, 0.01, functools.partial(self._execute, lane, work, future))

    def _execute(self, lane: Lane, work: Callable[[], Any], future: SimFuture[Any]) -> None:
        """Run ``work`` now; its thread stays busy until its answer is back."""
        world, worker = self.world, self.worker
        if not worker.alive:
            return
        value: Any = None
        error: BaseException | None = None
        try:
            value = work()
        except Violation:
            raise
        except BaseException as exc:
            error = exc
        faults, rng = world.faults, world.rng
        if lane is Lane.FUNCTIONS:
            if error is None and world.chance(faults.function_exit):
                error = SystemExit()  # the thread exits after the effect, with no result
            # Some functions run longer than a lease: only renewals keep their claim.
            busy = (
                rng.uniform(1.0, 3.0)
                if world.chance(faults.slow_function)
                else rng.uniform(0.001, 0.2)
            )
        elif _is_hook(work):  # the application's code: how long it blocks is its own
            busy = rng.uniform(1.0, 6.0) if world.chance(faults.slow_hook) else rng.uniform(0, 0.01)
        elif world.chance(faults.slow_ack):
            world.store_trouble(self.runner)
            busy = rng.uniform(0.0005, 0.3)
        else:
            busy = rng.uniform(0.0005, 0.01)

        def finish() -> None:
            if not worker.alive:
                return
            if lane is Lane.FUNCTIONS:
                self.runner.function_ends(work)
            self.lanes[lane].free += 1
            if error is None:
                future.set_result(value)
            else:
                future.set_exception(error)
            self._dispatch(lane)

        world.at(world.now + busy, finish)

    async def first(self, future: Any, deadline: float | None) -> bool:
        if deadline is None:
            await _settled(future)
            return True
        either: SimFuture[bool] = SimFuture()
        future.add_done_callback(lambda _: either.set_result(True))
        self.worker.at_clock(deadline, lambda: either.set_result(False))
        return await either

    async def sleep(self, seconds: float) -> None:
        woken: SimFuture[None] = SimFuture()
        self.world.at(self.world.now + seconds / self.worker.rate, lambda: woken.set_result(None))
        await woken

    async def close(self, last: Callable[[], None]) -> None:
        last()


def _is_hook(work: Callable[[], Any]) -> bool:
    """Whether ``work`` runs the application's ``on_in_doubt`` or ``on_action`` hook."""
    return isinstance(work, functools.partial) and work.func in (ask_in_doubt, report_action)


async def _settled(future: SimFuture[Any]) -> None:
    """Until ``future`` is done, whatever its outcome."""
    done: SimFuture[None] = SimFuture()
    future.add_done_callback(lambda _: done.set_result(None))
    await done


class SimRunner(Driver):
    """One worker's runner: the product's driver loop on the worker's runtime."""

    def __init__(self, worker: SimWorker) -> None:
        world = self.world = worker.world
        self.worker = worker
        rng = world.rng
        concurrency = rng.randint(1, 4)
        hook = rng.choice((None, None, _raising_hook, _checking_hook))
        if world.in_doubt_hook is not None:
            hook = IN_DOUBT_HOOKS[world.in_doubt_hook]
        # Some workers of the chaos serve one function only, and leave or fail the calls
        # of the other (drawn apart, so that other histories replay as they did).
        partial = random.Random(f"functions {world.seed} {worker.generation}")
        #: The function this worker does not serve, if any, and what it does with its calls.
        self.lacks: str | None = None
        self.unknown: Literal["leave", "fail"] = "leave"
        if world.chaos and partial.random() < 0.2:
            self.lacks = partial.choice(_FUNCTIONS).name
            self.unknown = partial.choice(("leave", "fail"))
        # The application's on_action hook: the final worker's always, when Sessions
        # require other actions; half the chaos workers' (drawn apart).
        told = random.Random(f"on_action {world.seed} {worker.generation}").random() < 0.5
        on_action = (
            self._told_of_action
            if world.other_actions is not None and (told or not world.chaos)
            else None
        )
        super().__init__(
            store=world.store,
            max_concurrency=concurrency,
            lease_seconds=LEASE_SECONDS,
            unknown_functions=self.unknown,
            on_in_doubt=hook,
            on_action=on_action,
            poll_interval=0.3,
            shutdown_grace=rng.choice((0.0, 0.5, 2.0)),
            unreachable_timeout=UNREACHABLE_TIMEOUT,
            idempotent_fast_path=True,  # the option the simulator covers
        )
        owner_closed(self._core.owner)  # a real owner id names this process:
        self._core.owner = f"sim-{worker.generation}"  # the store judges by lease alone
        for function in _FUNCTIONS:
            if function.name == self.lacks:
                continue
            counting = self._counting(function)
            self._registry.add(
                dataclasses.replace(
                    function,
                    func=counting,
                    timeout=world.timeout,
                    max_concurrency=world.limits.get(function.name),
                )
            )
        # The world's store stands for the database every worker shares: closing one
        # worker closes its connections, not the database.
        self._closes_store = False
        self.client = SimClient(self)  # type: ignore[assignment]
        self._rt = SimRuntime(worker, self)
        self._start_driver()
        take_notes = self._core.take_notes

        def noted() -> list[Note]:
            notes = take_notes()
            world.check_notes(self, notes)
            return notes

        self._core.take_notes = noted  # type: ignore[method-assign]
        #: The attempts running when a ``stop(force=True)`` reached the loop, for a
        #: Session whose serve it stopped: each function must be told (``ctx.cancelled``).
        self.force_stopped: set[tuple[CallKey, int]] = set()
        #: When each Session's run of failed requests began (world time), if one runs.
        self.failing_since: dict[str, float] = {}
        #: The attempts whose function raised (an application error: a failed result).
        self.raised: set[tuple[CallKey, int]] = set()
        #: The late outcomes this worker asked the store to keep.
        self.late_kept: list[tuple[CallKey, dict[str, Any]]] = []
        #: Sessions a request of this worker was answered 404 about.
        self.told_gone: set[str] = set()
        #: The attempts whose function this worker started.
        self.started: set[tuple[CallKey, int]] = set()
        #: Functions started, by Session (an attempt may run twice on the fast path:
        #: dropped after its claim was lost, then claimed afresh and run again).
        self.runs_by_session: Counter[str] = Counter()
        #: How many serves of each Session the application is in (those in their grace
        #: included).
        self.serving: Counter[str] = Counter()
        #: The attempts handed to a thread as their claim was sent (idempotent only).
        self.sent_with_claim: set[tuple[CallKey, int]] = set()
        #: Functions of each name whose thread runs them now (timed out ones too).
        self.running: Counter[str] = Counter()
        #: The context each call's function was last started with.
        self.contexts: dict[CallKey, CallContext] = {}
        #: For each call whose function the loop handed to a thread, the newest server
        #: state of its Session the pump had seen then.
        self.known_at_dispatch: dict[CallKey, float] = {}
        if world.mutate is not None:
            world.mutate(self)

    def _report_action(self, effect: ReportAction) -> None:
        """The core asks to tell ``on_action``: once per action while it serves."""
        problem = self.world.server.reporting_action(self, effect.session_id, effect.action)
        if problem is not None:
            raise Violation(f"seed {self.world.seed}: sim-{self.worker.generation}: {problem}")
        super()._report_action(effect)

    def _told_of_action(self, session_id: str, action: RequiredAction) -> None:
        """The application's ``on_action``: told of an action no function answers. A
        broken promise is raised by the scheduler, since the runner logs what a hook
        raises."""
        problem = self.world.server.told_of_action(self, session_id, action)
        if problem is not None and self.world.broken is None:
            self.world.broken = Violation(
                f"seed {self.world.seed}: sim-{self.worker.generation}: {problem}"
            )

    def _counting(self, function: RegisteredFunction) -> Callable[[str], str]:
        name, world = function.name, self.world

        def effect(order: str) -> str:
            call = current_call()
            key = CallKey(call.session_id, call.turn_id, call.call_id)
            self.started.add((key, call.attempt))
            self.runs_by_session[key.session_id] += 1
            self.contexts[key] = call
            self.running[name] += 1
            world.within_limit(self, name, self.running[name])
            world.function_started(self, key, call.attempt)
            world.check_context(self, call, name, order)
            world.runs[key] += 1
            if world.declines(key):
                self.raised.add((key, call.attempt))
                raise RuntimeError(f"{order} was declined")
            return f"{name}d {order}"

        return effect

    # -- what the loop shows the simulator ------------------------------------------------

    async def _pump(self) -> None:
        """A pump that raises is a bug, whatever the faults. Its serves hear of it as a
        ``RunnerError``, which a worker serving through chaos takes for a fault and
        serves again (and a worker killed later hides it), so the world is told here."""
        try:
            await super()._pump()
        except Exception as exc:
            if self.world.broken is None:
                self.world.broken = Violation(
                    f"seed {self.world.seed}: sim-{self.worker.generation}'s pump failed: {exc!r}"
                )
            raise

    def dispatching(self, work: Callable[[], Any]) -> None:
        """The loop hands a function to a thread: remember what it knew then. With
        ``idempotent_fast_path=True`` (docs/runner.md), a call of an idempotent function
        announced after the runner first saw its Session starts as its claim is sent:
        the fault-free worker, whose store always answers, never waits for the answer
        to start one."""
        assert isinstance(work, functools.partial), "functions run as call_sync partials"
        effect = work.args[0]
        assert isinstance(effect, RunFunction)
        world = self.world
        self.known_at_dispatch[effect.key] = world.server.knows_since(self, effect.key.session_id)
        call = self._core.calls.get(effect.key)
        if not self.serving[effect.key.session_id] and world.broken is None:
            # docs/runner.md, "When a serve ends early": running functions go on, and a
            # claim whose function never started is given back at once.
            world.broken = Violation(
                f"seed {world.seed}: {self._core.owner} started {effect.key.call_id} "
                f"(attempt {effect.attempt}) after its last serve of {effect.key.session_id} "
                "ended, instead of giving its claim back"
            )
        if call is not None and call.claim_unanswered:
            assert effect.function.idempotent, "only an idempotent function starts so"
            assert effect.attempt == 1, "only with a first claim"
            self.sent_with_claim.add((effect.key, effect.attempt))
        elif (
            call is not None
            and call.fresh
            and effect.attempt == 1
            and effect.function.idempotent
            and not world.chaos
            and world.broken is None
        ):
            world.broken = Violation(
                f"seed {world.seed}: the fault-free {self._core.owner} started "
                f"{effect.key.call_id} of idempotent {effect.function.name}, announced "
                "after it first saw its Session, only once its claim was answered"
            )

    def asking(self, effect: AskInDoubt) -> None:
        """``on_in_doubt`` is asked about the call as the server and the store know it:
        its function, its arguments, and the runs its record counts."""
        world = self.world
        call, record = world.server.call(effect.key), world.store.get(effect.key)
        if call is None or (effect.function_name, effect.arguments) != (call.name, call.arguments):
            wrong = f"{effect.function_name} {effect.arguments!r}"
        elif record is not None and record.state is CallState.IN_DOUBT:
            wrong = "" if effect.attempts == record.attempts else f"{effect.attempts} attempts"
        else:
            wrong = ""
        if wrong and world.broken is None:
            world.broken = Violation(
                f"seed {world.seed}: {self._core.owner} asked on_in_doubt about "
                f"{effect.key.call_id} as {wrong}; the server and the store hold {call}, {record}"
            )

    def function_ends(self, work: Callable[[], Any]) -> None:
        """A function's thread is done with it. If its Turn's cancel reached the loop
        while it ran, the function was told: ``ctx.cancelled`` is set."""
        effect = work.args[0]  # type: ignore[attr-defined]
        key, world = effect.key, self.world
        if (key, effect.attempt) in self.started:
            self.running[effect.function.name] -= 1
        ctx = self.contexts.get(key)
        turn = world.server.sessions[key.session_id].turn(key.turn_id)
        assert turn is not None
        if ctx is None or ctx.attempt != effect.attempt:
            return
        if (key, effect.attempt) in self.force_stopped and not ctx.cancelled.is_set():
            world.broken = world.broken or Violation(
                f"seed {world.seed}: {self._core.owner} was stopped with force=True while "
                f"{key.call_id} ran, and its function was never told (ctx.cancelled)"
            )
        if turn.cancelled_at is None:
            return
        known = world.server.knows_since(self, key.session_id)
        if known >= turn.cancelled_at and not ctx.cancelled.is_set() and world.broken is None:
            world.broken = Violation(
                f"seed {world.seed}: {self._core.owner} knew {turn.id} cancelled while "
                f"{key.call_id} ran, and its function was never told (ctx.cancelled)"
            )

    def _attach(self, session_id: str, until: Mode) -> Serve:
        serve = super()._attach(session_id, until)
        self.serving[session_id] += 1
        return serve

    def _detach(self, serve: Serve) -> None:
        """The library's own, observed: the world reads every serve's report."""
        super()._detach(serve)
        self.serving[serve.session_id] -= 1
        if self.worker.alive:
            self.world.reports.append((self.worker.generation, serve.report))
        session_id = serve.session_id
        if all(other.session_id != session_id for other in self._core.serves.values()):
            self.world.server.told_while_served.pop((self.worker.generation, session_id), None)

    def seen(self, messages: list[Message]) -> None:
        """The pump drained ``messages``: what they show of the server is known now, and
        a ``stop(force=True)`` reaches the functions running for the serves it stops."""
        self.world.server.seen_by(self, messages)
        core = self._core
        for message in messages:
            if isinstance(message, Stop) and message.force:
                stopped = {s.session_id for s in core.serves.values() if s.id <= message.last_serve}
                self.force_stopped.update(
                    (call.key, call.attempts)
                    for call in core.calls.values()
                    if call.phase is Phase.RUNNING and call.key.session_id in stopped
                )

    def _after_round(self) -> None:
        """``busy`` is kept incrementally; it must agree with a scan of every call. And
        no served Session waits for a read due further off than the longest wait the
        runner's policy has (a poll, or a store retry): a serve, stopped or idle, cannot
        return before that read (a failed claim once put it at clock 0.0, and a
        monotonic clock may read below zero). And a round judges only the serves of
        Sessions touched since the last: every serve left out must be one that could
        not return (the pump would otherwise leave it waiting for news that never
        comes)."""
        self._read_times_kept()
        self._reads_due_soon()
        self._untouched_serves_cannot_finish()
        scanned = {
            call.key.session_id
            for call in self._core.calls.values()
            if call.phase not in (Phase.POSTED, Phase.DONE)
        }
        for session_id in self.world.server.sessions:
            if self._core.busy(session_id) != (session_id in scanned):
                raise Violation(
                    f"seed {self.world.seed}: busy({session_id}) disagrees with a scan of its calls"
                )

    def _untouched_serves_cannot_finish(self) -> None:
        core = self._core
        if core._touched_all:
            return
        for serve in core.serves.values():
            verdict = self._verdicts.get(serve.id)
            if serve.session_id in core._touched or verdict is None or verdict.done():
                continue
            try:
                ready = core.may_finish(serve)
            except Exception as exc:
                ready, why = True, f"has a fatal error ({exc!r})"
            else:
                why = "could return"
            # A settled serve waits for its progress marks: their write, or its retry,
            # touches every serve when it ends; and for the saves of results posted as
            # they were saved (the idempotent fast path), whose answers touch its Session.
            marks = serve.until not in ("connected", "created") and (
                core._marks_writing
                or core._marks_failed
                or any(key.session_id == serve.session_id for key in core._saving_posted)
            )
            if ready and not marks:
                raise Violation(
                    f"seed {self.world.seed}: {core.owner}'s serve {serve.id} of "
                    f"{serve.session_id} ({serve.until}) {why} but was not judged: no change "
                    "to its Session touched it"
                )

    def _read_times_kept(self) -> None:
        """The core keeps when each Session is read next, refreshed only for Sessions
        touched since: a Session left out must have the time a fresh look gives."""
        core = self._core
        if core._reads_all or core._touched_all:
            return
        stale = {**core._reads_stale, **core._touched}
        for session_id in set(core._serves_by_session) | set(core._next_reads):
            if session_id in stale:
                continue
            serves = core._serves_by_session.get(session_id, {})
            fresh = core._next_read(core._view(session_id), serves.values()) if serves else None
            if core._next_reads.get(session_id) != fresh:
                raise Violation(
                    f"seed {self.world.seed}: {core.owner} keeps {session_id}'s next read at "
                    f"{core._next_reads.get(session_id)}, but it is due at {fresh}: no change "
                    "to the Session touched it"
                )

    def _reads_due_soon(self) -> None:
        core, now = self._core, self._now()
        limit = max(core.poll_interval, STORE_RETRY_MAX_DELAY)
        for session_id, serves in core._serves_by_session.items():
            read_at = core._next_read(core._view(session_id), serves.values())
            if read_at is not None and read_at - now > limit + 1e-6:
                raise Violation(
                    f"seed {self.world.seed}: {self._core.owner}'s next read of {session_id} is "
                    f"due in {read_at - now:.1f} s (the longest wait is {limit:g} s)"
                )

    # -- the store's I/O, with faults ------------------------------------------------------

    def _perform_store(self, effect: StoreEffect) -> StoreAnswer:
        world = self.world
        self._asks_about_real_calls(effect)
        if isinstance(effect, LookupMany):
            return self._perform_lookups(effect)
        if isinstance(effect, KeepLateOutcome):
            self.late_kept.append((effect.key, effect.outcome))
        if isinstance(effect, MarkInDoubt):
            self._check_own_doubt(effect)
        keys = [key for key, _ in effect.changes] if isinstance(effect, WriteMarks) else []
        if isinstance(effect, (ClaimCall, Lookup)):
            keys = [effect.key]
        if any(key in world.unstorable for key in keys):
            return StoreAnswer(effect, error=StoreKeyError("ids the store cannot hold"))
        answer = self._through_faults(effect, world.store, lost="commit, then lost")
        if (
            isinstance(effect, SaveResult)
            and effect.owner == self._core.owner
            and effect.event.get("success") is True
            and isinstance(answer.value, CallRecord)
            and answer.value.result != effect.event
        ):
            world.lost_race(self, effect.key, effect.event)
        return answer

    def _perform_lookups(self, effect: LookupMany) -> StoreAnswer:
        """A round's lookups: one read of the store, which an outage (or a connection
        lost before the answer) fails as a whole. Ids the store cannot hold fail the
        read they are in, as one SQL statement does: the real batch code then reads
        each key alone, and only those calls are refused."""
        reads = cast(ResultStore, _Reads(self.world))
        return self._through_faults(effect, reads, lost="read, then lost")

    def _through_faults(self, effect: StoreEffect, store: ResultStore, *, lost: str) -> StoreAnswer:
        """``effect`` on ``store``, unless the store is down or this worker cut off from
        it; an answer may be lost after the store did the work (``lost`` says which)."""
        world = self.world
        if world.chance(world.faults.store_down):
            world.store_trouble(self)
            return StoreAnswer(effect, error=StoreUnavailableError("simulated outage"))
        if world.cut_off(self.worker):
            world.store_trouble(self)
            return StoreAnswer(effect, error=StoreUnavailableError("cut off from the store"))
        world.store.caller = self
        try:
            answer = perform_store(effect, store)
        finally:
            world.store.caller = None
        if answer.error is None and world.chance(world.faults.commit_then_error):
            world.store_trouble(self)
            return StoreAnswer(effect, error=StoreUnavailableError(lost))
        return answer

    def _asks_about_real_calls(self, effect: StoreEffect) -> None:
        """What the runner asks of the store names calls the server announced, and a
        claim, take-over, release, mark of doubt or renewal is asked under the runner's
        own owner id with its own lease (a save under it, or under none for the in-doubt
        policy's answer): the store judges by these, and a request about no call, or
        under another name, changes what it should not, or nothing."""
        core = self._core
        keys: list[object]
        if isinstance(effect, WriteMarks):
            keys = [key for key, _ in effect.changes]
        elif isinstance(effect, RenewLeases):
            keys = list(effect.keys)
        elif isinstance(effect, LookupMany):
            keys = [lookup.key for lookup in effect.lookups]
        else:
            keys = [effect.key]
        server = self.world.server
        wrong: list[object] = [
            key for key in keys if not isinstance(key, CallKey) or server.call(key) is None
        ]
        owners = {core.owner, None} if isinstance(effect, SaveResult) else {core.owner}
        if (
            isinstance(effect, (ClaimCall, TakeOver, MarkInDoubt, Release, RenewLeases, SaveResult))
            and effect.owner not in owners
        ):
            wrong.append(f"owner {effect.owner!r}")
        if (
            isinstance(effect, (ClaimCall, TakeOver, RenewLeases))
            and effect.lease_seconds != core.lease_seconds
        ):
            wrong.append(f"lease {effect.lease_seconds!r}")
        if isinstance(effect, ClaimCall) and not wrong:
            call = server.call(effect.key)
            if call is not None and effect.function_name != call.name:
                wrong.append(f"function {effect.function_name!r}")
        if wrong:
            raise Violation(
                f"seed {self.world.seed}: {core.owner} asked the store {type(effect).__name__} "
                f"with {', '.join(map(str, wrong))}: {effect!r}"
            )

    def _check_own_doubt(self, effect: MarkInDoubt) -> None:
        """A worker puts its own claim in doubt only if it started that attempt's
        function: a claim it made and never ran is not in doubt, it is its to run."""
        record = self.world.store.get(effect.key)
        if (
            record is not None
            and record.state is CallState.STARTED
            and record.owner == self._core.owner
            and (effect.key, record.attempts) not in self.started
        ):
            raise Violation(
                f"seed {self.world.seed}: {self._core.owner} marks its own claim of "
                f"{effect.key.call_id} (attempt {record.attempts}) in doubt, although it "
                "never started that attempt's function"
            )

    # -- requests to the simulated server -------------------------------------------------

    async def request(
        self,
        handle: Callable[[Server], T],
        timeout: float | None,
        *,
        write: bool = False,
        session_id: str | None = None,
        read: bool = False,
    ) -> T:
        """One HTTP request: it reaches the server after a latency (and is applied there
        even if its caller gave up), and its answer comes back after another, unless the
        caller's ``timeout`` (this worker's seconds) passes first. A failed request of a
        Session starts (or continues) its run of failures, which only a ``read`` of it
        that succeeds ends, as the runner counts them."""
        world = self.world
        rng, faults = world.rng, world.faults
        there = rng.uniform(0.0005, 0.03)
        back = rng.uniform(0.0005, 0.5 if world.chance(faults.slow_response) else 0.03)
        answer: SimFuture[T] = SimFuture()

        def arrive() -> None:
            value: Any = None
            error: APIError | None = None
            world.server.requester = self
            try:
                world.server.requested(self)
                if not write and world.chance(faults.read_error):
                    raise APIConnectionError(request=REQUEST)
                value = handle(world.server)
                if write and world.chance(faults.post_lost):
                    error = APIConnectionError(request=REQUEST)  # applied, answer lost
            except APIError as exc:
                error = exc
            finally:
                world.server.requester = None
            world.at(world.now + back, lambda: answered(value, error))

        def answered(value: Any, error: APIError | None) -> None:
            if answer.done():
                return
            if session_id is not None and error is not None:
                self.failing_since.setdefault(session_id, world.now)
                if isinstance(error, NotFoundError) and session_id not in self.told_gone:
                    self.told_gone.add(session_id)
                    world.told_gone(self.worker, session_id)
            elif session_id is not None and read:
                self.failing_since.pop(session_id, None)
            if error is None:
                answer.set_result(value)
            else:
                answer.set_exception(error)

        world.at(world.now + there, arrive)
        if timeout is not None and there + back > timeout / self.worker.rate:
            world.at(
                world.now + timeout / self.worker.rate,
                lambda: answered(None, APITimeoutError(request=REQUEST)),
            )
        return await answer


class SimStream:
    """One live event stream, as ``client.sessions.events.stream`` returns it: events
    arrive in order after a latency; a drop ends it with a connection error."""

    def __init__(self, runner: SimRunner, session_id: str) -> None:
        self.runner = runner
        self.session_id = session_id
        self.open = True
        #: Events of one stream arrive in the order they were sent.
        self.last_arrival = 0.0
        self._events: deque[SessionEvent] = deque()
        self._ended: BaseException | None = None
        self._waiter: SimFuture[None] | None = None

    def push(self, event: SessionEvent) -> None:
        if self._ended is None:
            self._events.append(event)
            self._wake()

    def end(self, error: BaseException) -> None:
        if self._ended is None:
            self._ended = error
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None:
            self._waiter.set_result(None)

    def __aiter__(self) -> SimStream:
        return self

    async def __anext__(self) -> SessionEvent:
        while not self._events and self._ended is None:
            self._waiter = SimFuture()
            await self._waiter
            self._waiter = None
        if self._events:
            return self._events.popleft()
        if isinstance(self._ended, StopAsyncIteration):
            raise StopAsyncIteration
        assert self._ended is not None
        raise self._ended

    async def close(self) -> None:
        self.open = False
        self.runner.world.server.unsubscribe(self)


class SimClient:
    """What the serving code uses of ``AsyncClient``, answered by the simulated server."""

    base_url = REQUEST.url.copy_with(path="/v1/")

    def __init__(self, runner: SimRunner) -> None:
        self.sessions = _Sessions(runner)


class _Sessions:
    def __init__(self, runner: SimRunner) -> None:
        self._runner = runner
        self.events = _Events(runner)
        self.turns = _Turns(runner)
        self.items = _Items(runner)

    async def retrieve(self, session_id: str, *, timeout: float | None = None) -> Session:
        return await self._runner.request(
            lambda server: server.read(session_id), timeout, session_id=session_id, read=True
        )


class _Events:
    def __init__(self, runner: SimRunner) -> None:
        self._runner = runner

    async def create(
        self,
        session_id: str,
        *,
        events: list[Any],
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> None:
        batch = list(events)
        await self._runner.request(
            lambda server: server.accept(session_id, batch, idempotency_key),
            timeout,
            write=True,
            session_id=session_id,
        )

    async def stream(self, session_id: str) -> SimStream:
        stream = SimStream(self._runner, session_id)
        return await self._runner.request(
            lambda server: server.subscribe(stream), None, session_id=session_id
        )


class _Turns:
    def __init__(self, runner: SimRunner) -> None:
        self._runner = runner

    async def retrieve(
        self, turn_id: str, *, session_id: str, timeout: float | None = None
    ) -> Turn:
        return await self._runner.request(
            lambda server: server.turn_snapshot(session_id, turn_id), timeout, session_id=session_id
        )


class _Items:
    def __init__(self, runner: SimRunner) -> None:
        self._runner = runner

    def list(
        self, session_id: str, *, order: str, timeout: float | None = None
    ) -> AsyncIterator[Any]:
        assert order in ("asc", "desc"), f"unknown order {order!r}"
        return self._all(session_id, timeout, newest_first=order == "desc")

    async def _all(
        self, session_id: str, timeout: float | None, *, newest_first: bool
    ) -> AsyncIterator[Any]:
        items = await self._runner.request(
            lambda server: server.items(session_id), timeout, session_id=session_id
        )
        for item in reversed(items) if newest_first else items:
            yield item


class _Reads:
    """The world's store as a batch of lookups reads it: a read that holds an id the
    store cannot hold fails (``get_many`` as a whole, ``get`` for that key)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def _refuse(self, keys: list[CallKey]) -> None:
        if any(key in self.world.unstorable for key in keys):
            raise StoreKeyError("ids the store cannot hold")

    def get_many(self, keys: Iterable[CallKey]) -> dict[CallKey, CallRecord]:
        wanted = list(keys)
        self._refuse(wanted)
        return self.world.store.get_many(wanted)

    def get(self, key: CallKey) -> CallRecord | None:
        self._refuse([key])
        return self.world.store.get(key)

    def is_stale(self, record: CallRecord, *, now: float | None = None) -> bool:
        return self.world.store.is_stale(record, now=now)
