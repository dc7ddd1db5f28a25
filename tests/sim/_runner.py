"""The runner under test: the real ``AsyncServing`` on the simulated clock.

``serve``, ``run_turn``, ``recover`` and the requests effects make (``_post``,
``_read``) are the library's own code, as is the effect routing (``carry``) and each
round (``run_round``). What a driver provides is written here on the world's clock:
the pump, where effects run, how a serve waits for its verdict and follows its stream,
and a client whose requests reach the simulated server after a seeded latency.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from openagentcore import APIConnectionError, APIError, APITimeoutError
from openagentcore.runner import InDoubtCall, InDoubtDecision, current_call
from openagentcore.runner._base import ServeTimeout
from openagentcore.runner._core import Mode, Phase, Serve, heeds
from openagentcore.runner._effects import (
    AskInDoubt,
    CancelFunction,
    ClaimCall,
    FunctionOutcome,
    Lookup,
    MarkInDoubt,
    PostResults,
    ReadSession,
    ReportAction,
    RunFunction,
    StoreAnswer,
    StoreEffect,
    WriteMarks,
    perform_store,
)
from openagentcore.runner._execution import call_sync
from openagentcore.runner._pump import Message, Received, Stop, ask_in_doubt, carry, run_round
from openagentcore.runner._registry import RegisteredFunction, describe_function
from openagentcore.runner._serving_async import AsyncServing
from openagentcore.store import CallKey, CallState, StoreKeyError, StoreUnavailableError
from openagentcore.store._records import owner_closed
from openagentcore.types import Session, Turn

from ._server import REQUEST, Server
from ._tasks import SimFuture, Violation

if TYPE_CHECKING:
    from ._world import SimWorker

__all__ = ["CHECKED_BY_THE_APPLICATION", "LEASE_SECONDS", "MAX_ATTEMPTS", "SimRunner"]

LEASE_SECONDS = 1.0
MAX_ATTEMPTS = 3
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


class SimRunner(AsyncServing):
    """One worker's runner: built like the real ones, driven by the world's scheduler."""

    def __init__(self, worker: SimWorker) -> None:
        world = self.world = worker.world
        self.worker = worker
        rng = world.rng
        super().__init__(
            store=world.store,
            max_concurrency=rng.randint(1, 4),
            lease_seconds=LEASE_SECONDS,
            unknown_functions="leave",
            on_in_doubt=rng.choice((None, None, _raising_hook, _checking_hook)),
            poll_interval=0.3,
            shutdown_grace=rng.choice((0.0, 0.5, 2.0)),
        )
        owner_closed(self._core.owner)  # a real owner id names this process:
        self._core.owner = f"sim-{worker.generation}"  # the store judges by lease alone
        for function in _FUNCTIONS:
            counting = self._counting(function)
            self._registry.add(dataclasses.replace(function, func=counting, timeout=world.timeout))
        if world.mutate is not None:
            world.mutate(self._core)
        self.client = SimClient(self)  # type: ignore[assignment]
        self._inbox: list[Message] = []
        self._pump_at: float | None = None
        self._verdicts: dict[int, SimFuture[None]] = {}
        #: Resolved after every round of the pump (for ``_wait``'s grace).
        self._round: SimFuture[None] = SimFuture()
        #: The attempts whose function this worker started.
        self._started: set[tuple[CallKey, int]] = set()

    def _counting(self, function: RegisteredFunction) -> Callable[[str], str]:
        name, runs = function.name, self.world.runs

        def effect(order: str) -> str:
            call = current_call()
            runs[CallKey(call.session_id, call.turn_id, call.call_id)] += 1
            return f"{name}d {order}"

        return effect

    # -- the primitives AsyncServing calls ----------------------------------------------

    def _now(self) -> float:
        """This worker's clock, which may run fast or slow (skew between workers)."""
        return self.worker.clock()

    def _attach(self, session_id: str, until: Mode) -> Serve:
        serve = self._core.attach(session_id, until, self.worker.clock())
        self._verdicts[serve.id] = SimFuture()
        self._wake()
        return serve

    def _detach(self, serve: Serve) -> None:
        self._core.detach(serve, self.worker.clock())
        self._verdicts.pop(serve.id, None)
        if self.worker.alive:
            self.world.reports.append(serve.report)
            self._wake()

    @contextlib.asynccontextmanager
    async def _reader(self, serve: Serve) -> AsyncIterator[None]:
        server = self.world.server
        subscriber = server.subscribe(self, serve.session_id, serve.id)
        try:
            yield
        finally:
            server.unsubscribe(serve.session_id, subscriber)

    async def _wait(self, serve: Serve, deadline: float | None, *, interruptible: bool) -> None:
        if await self._first(self._verdicts[serve.id], deadline):
            return
        # Out of time, as the real drivers do: give back claims nobody will run, let
        # running calls finish and post within the grace, then report.
        self._core.detach(serve, self.worker.clock())
        self._wake()
        grace_end = self.worker.clock() + self.shutdown_grace
        while self._core.busy(serve.session_id) and self.worker.clock() < grace_end:
            await self._first(self._round, grace_end)
        raise ServeTimeout(f"Session {serve.session_id} was not settled in time", serve.report)

    async def _first(self, future: SimFuture[None], deadline: float | None) -> bool:
        """Wait for ``future`` (raising its error) or for ``deadline`` (this worker's
        clock), whichever comes first; whether the future did."""
        if deadline is None:
            await future
            return True
        either: SimFuture[bool] = SimFuture()
        future.add_done_callback(lambda _: either.set_result(True))
        self.worker.at_clock(deadline, lambda: either.set_result(False))
        if not await either:
            return False
        future.result()
        return True

    def _change_serve(self, serve: Serve, change: Callable[[], T]) -> T:
        result = change()
        self._verdicts[serve.id] = SimFuture()
        self._wake()
        return result

    def _send_stop(self, force: bool) -> None:
        self.deliver_at(self.world.now, Stop(self._core.last_serve_id, force))

    def _stop_from_signal(self) -> None:
        self.stop()

    # -- the pump -----------------------------------------------------------------------

    def deliver_at(self, when: float, message: Message) -> None:
        if isinstance(message, Received) and not heeds(message.event):
            return  # as the drivers' readers do

        def arrive() -> None:
            if self.worker.alive:
                self._inbox.append(message)
                self._schedule_pump(0.0)

        self.world.at(when, arrive)

    def _wake(self) -> None:
        self._schedule_pump(0.0)

    def _schedule_pump(self, delay: float) -> None:
        when = self.world.now + delay
        if not self.worker.alive or (self._pump_at is not None and self._pump_at <= when):
            return
        self._pump_at = when
        self.world.at(when, self._pump)

    def _pump(self) -> None:
        worker, world, core = self.worker, self.world, self._core
        if not worker.alive or self._pump_at is None or self._pump_at > world.now:
            return
        self._pump_at = None
        now = worker.clock()
        messages, self._inbox = self._inbox, []
        decided = run_round(core, self._observer, messages, now)
        self._check_bookkeeping()
        for serve_id, error in decided.verdicts.items():
            future = self._verdicts.get(serve_id)
            if future is None or future.done:
                continue
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)
        spent, self._round = self._round, SimFuture()
        spent.set_result(None)
        for effect in decided.effects:
            if world.chance(world.faults.crash):
                worker.crash()
                return
            for store_call in carry(self, [effect]):
                world.later(0.0005, 0.01, functools.partial(self._store, store_call))
        if core.serves or core.busy():
            # At least a microsecond: converting between this worker's clock and the
            # world's can round a due time to just ahead of "now" for ever.
            self._schedule_pump(max(core.next_wakeup(now) / worker.rate, 1e-6))

    def _check_bookkeeping(self) -> None:
        """``busy`` is kept incrementally; it must agree with a scan of every call."""
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

    # -- carrying out effects (a Carrier, as the real drivers are) ------------------------

    def _run_function(self, effect: RunFunction) -> None:
        self._started.add((effect.key, effect.attempt))
        self.world.later(0.0, 0.005, lambda: self._run(effect))

    def _cancel_function(self, effect: CancelFunction) -> None:
        return  # the simulated functions finish at once

    def _ask_in_doubt(self, effect: AskInDoubt) -> None:
        assert self._on_in_doubt is not None
        answer = ask_in_doubt(self._on_in_doubt, effect)
        self.deliver_at(self.world.now + self.world.rng.uniform(0.0, 0.01), answer)

    def _report_action(self, effect: ReportAction) -> None:
        return  # the simulated Sessions require no other actions

    def _post_results(self, effect: PostResults) -> None:
        self._spawn(self._post(effect))

    def _read_session(self, effect: ReadSession) -> None:
        self._spawn(self._read(effect))

    def _spawn(self, request: Any) -> None:
        """A request of the pump's (``_post``, ``_read``): its outcome is a message."""

        def done(message: Message | None, error: Exception | None) -> None:
            if error is not None or message is None:
                raise Violation(f"seed {self.world.seed}: a request lost its answer: {error!r}")
            self.deliver_at(self.world.now, message)

        self.worker.spawn(request, done)

    def _store(self, effect: StoreEffect) -> None:
        world = self.world
        if isinstance(effect, MarkInDoubt):
            self._check_own_doubt(effect)
        keys = [key for key, _ in effect.changes] if isinstance(effect, WriteMarks) else []
        if isinstance(effect, (ClaimCall, Lookup)):
            keys = [effect.key]
        if any(key in world.unstorable for key in keys):
            answer = StoreAnswer(effect, error=StoreKeyError("ids the store cannot hold"))
        elif world.chance(world.faults.store_down):
            answer = StoreAnswer(effect, error=StoreUnavailableError("simulated outage"))
        else:
            answer = perform_store(effect, world.store)
            if answer.error is None and world.chance(world.faults.commit_then_error):
                answer = StoreAnswer(effect, error=StoreUnavailableError("commit, then lost"))
        slow = world.chance(world.faults.slow_ack)
        self.deliver_at(world.now + world.rng.uniform(0.0005, 0.3 if slow else 0.01), answer)

    def _check_own_doubt(self, effect: MarkInDoubt) -> None:
        """A worker puts its own claim in doubt only if it started that attempt's
        function: a claim it made and never ran is not in doubt, it is its to run."""
        record = self.world.store.get(effect.key)
        if (
            record is not None
            and record.state is CallState.STARTED
            and record.owner == self._core.owner
            and (effect.key, record.attempts) not in self._started
        ):
            raise Violation(
                f"seed {self.world.seed}: {self._core.owner} marks its own claim of "
                f"{effect.key.call_id} (attempt {record.attempts}) in doubt, although it "
                "never started that attempt's function"
            )

    def _run(self, effect: RunFunction) -> None:
        if not self.worker.alive:
            return  # killed before the function started: no effect
        world = self.world
        outcome = call_sync(effect, self._hooks, effect.context())
        if world.chance(world.faults.function_exit):
            outcome = FunctionOutcome(effect.key, None)  # SystemExit after the effect
        self.deliver_at(world.now + world.rng.uniform(0.001, 0.2), outcome)

    # -- requests to the simulated server -------------------------------------------------

    async def request(
        self, handle: Callable[[Server], T], timeout: float | None, *, write: bool = False
    ) -> T:
        """One HTTP request: it reaches the server after a latency (and is applied there
        even if its caller gave up), and its answer comes back after another, unless the
        caller's ``timeout`` (this worker's seconds) passes first."""
        world = self.world
        rng, faults = world.rng, world.faults
        there = rng.uniform(0.0005, 0.03)
        back = rng.uniform(0.0005, 0.5 if world.chance(faults.slow_response) else 0.03)
        answer: SimFuture[T] = SimFuture()

        def arrive() -> None:
            value: Any = None
            error: APIError | None = None
            try:
                if not write and world.chance(faults.read_error):
                    raise APIConnectionError(request=REQUEST)
                value = handle(world.server)
                if write and world.chance(faults.post_lost):
                    error = APIConnectionError(request=REQUEST)  # applied, answer lost
            except APIError as exc:
                error = exc
            world.at(
                world.now + back,
                lambda: answer.set_result(value) if error is None else answer.set_exception(error),
            )

        world.at(world.now + there, arrive)
        if timeout is not None and there + back > timeout / self.worker.rate:
            world.at(
                world.now + timeout / self.worker.rate,
                lambda: answer.set_exception(APITimeoutError(request=REQUEST)),
            )
        return await answer


class SimClient:
    """What the serving code uses of ``AsyncClient``, answered by the simulated server."""

    def __init__(self, runner: SimRunner) -> None:
        self.sessions = _Sessions(runner)


class _Sessions:
    def __init__(self, runner: SimRunner) -> None:
        self._runner = runner
        self.events = _Events(runner)
        self.turns = _Turns(runner)
        self.items = _Items(runner)

    async def retrieve(self, session_id: str, *, timeout: float | None = None) -> Session:
        return await self._runner.request(lambda server: server.snapshot(session_id), timeout)


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
            lambda server: server.accept(session_id, batch, idempotency_key), timeout, write=True
        )


class _Turns:
    def __init__(self, runner: SimRunner) -> None:
        self._runner = runner

    async def retrieve(
        self, turn_id: str, *, session_id: str, timeout: float | None = None
    ) -> Turn:
        return await self._runner.request(
            lambda server: server.turn_snapshot(session_id, turn_id), timeout
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
        items = await self._runner.request(lambda server: server.items(session_id), timeout)
        for item in reversed(items) if newest_first else items:
            yield item
