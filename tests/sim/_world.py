"""A deterministic world for the runner core: one seed replays a whole faulty history.

The real :class:`RunnerCore`, the drivers' shared logic (``feed``, ``judge``,
``perform_store``, ``ask_in_doubt``, ``call_sync``) and the real store rules
(:class:`MemoryResultStore`) run against a simulated server (the contract's
required-actions and result table, the live stream), a simulated clock and a
scheduler that delivers every answer after a seeded delay. Faults: store outages,
commits whose answer is an error, slow acknowledgements, lost POST responses, 5xx,
redirects, transient and final 409s, calls announced before they accept results,
dropped and duplicated stream events, cancelled Turns, functions that exit without a
result, ``on_in_doubt`` hooks that raise, functions that finish after their timeout,
and workers killed at any effect boundary.

Afterwards :meth:`World.check` asserts the runner's promises.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from openagentcore import (
    APIConnectionError,
    APIStatusError,
    BadRequestError,
    ConflictError,
    InternalServerError,
)
from openagentcore.runner import InDoubtCall, InDoubtDecision, current_call
from openagentcore.runner._core import Phase, RunnerCore, RunnerError, Serve
from openagentcore.runner._effects import (
    AskInDoubt,
    CancelFunction,
    ClaimCall,
    FunctionOutcome,
    Lookup,
    PostOutcome,
    PostResults,
    ReadSession,
    ReportAction,
    RunFunction,
    SessionOutcome,
    StoreAnswer,
    StoreEffect,
    WriteMarks,
    perform_store,
)
from openagentcore.runner._execution import Hooks, call_sync
from openagentcore.runner._pump import (
    Connected,
    Dropped,
    Message,
    Received,
    ask_in_doubt,
    carry,
    run_round,
)
from openagentcore.runner._registry import FunctionRegistry, describe_function
from openagentcore.runner._results import ENDED_WITHOUT_RESULT, IN_DOUBT_ERROR
from openagentcore.store import (
    CallKey,
    MemoryResultStore,
    StoreKeyError,
    StoreUnavailableError,
)
from openagentcore.types import (
    FunctionCallAction,
    FunctionCallItem,
    FunctionCallOutputItem,
    ItemAddedEvent,
    ItemDoneEvent,
    Session,
    TurnCompletedEvent,
)

__all__ = ["Faults", "Violation", "World", "run_seed"]

LEASE_SECONDS = 1.0
MAX_ATTEMPTS = 3
_REQUEST = httpx.Request("POST", "http://sim.invalid/v1/agents/sessions/s/events")


class Violation(AssertionError):
    """A promise of the runner did not hold in this history."""


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
    stream_drop: float = 0.0
    stream_dup: float = 0.0
    crash: float = 0.0
    function_exit: float = 0.0
    cancel_turn: float = 0.0
    early_announce: float = 0.0
    #: Calls whose ids the store refuses for good (as PostgreSQL refuses a NUL).
    unstorable_id: float = 0.0

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
            stream_drop=p(0.1),
            stream_dup=p(0.2),
            crash=p(0.08),
            function_exit=p(0.5),
            cancel_turn=p(0.1),
            early_announce=p(0.3),
            unstorable_id=p(0.2),
        )


@dataclass
class _ServerCall:
    key: CallKey
    name: str
    arguments: str
    accept_at: float


@dataclass
class _ServerSession:
    id: str
    turn_id: str
    steps: list[list[tuple[str, str]]]
    step: int = -1
    status: str = "running"
    pending: dict[str, _ServerCall] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    announced: list[_ServerCall] = field(default_factory=list)
    cancelled: bool = False
    idempotency: dict[str, str] = field(default_factory=dict)


@dataclass
class _Subscriber:
    worker: SimWorker
    serve_id: int
    connected: bool = True


class World:
    """Everything one seed runs: clock, scheduler, server, store, workers."""

    def __init__(self, seed: int, *, mutate: Callable[[RunnerCore], None] | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.faults = Faults.draw(self.rng)
        #: The functions' ``timeout``, drawn apart so that seeds without one replay the
        #: histories they had before timeouts were simulated.
        self.timeout = random.Random(f"timeout {seed}").choice((None, None, 0.05, 0.15))
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self.store = MemoryResultStore(clock=lambda: 1_700_000_000.0 + self.now)
        self.mutate = mutate
        self.sessions: dict[str, _ServerSession] = {}
        self.subscribers: dict[str, list[_Subscriber]] = {}
        #: Calls the store refuses to record (their ids cannot be stored).
        self.unstorable: set[CallKey] = set()
        #: Runs of each call's function (effects).
        self.runs: Counter[CallKey] = Counter()
        self.reports: list[Any] = []
        self.chaos = True
        self.generation = itertools.count(1)
        self.workers: list[SimWorker] = []
        self._make_sessions()

    # -- scheduling -----------------------------------------------------------------------

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (when, next(self._order), action))

    def later(self, low: float, high: float, action: Callable[[], None]) -> None:
        self.at(self.now + self.rng.uniform(low, high), action)

    def chance(self, probability: float) -> bool:
        return self.chaos and probability > 0 and self.rng.random() < probability

    def run_until(self, end: float, *, stop: Callable[[], bool] = lambda: False) -> None:
        while self._queue and self._queue[0][0] <= end and not stop():
            when, _, action = heapq.heappop(self._queue)
            self.now = max(self.now, when)
            action()

    # -- the server -------------------------------------------------------------------------

    def _make_sessions(self) -> None:
        for s in range(self.rng.randint(1, 2)):
            steps = [
                [
                    (self.rng.choice(("charge", "reserve")), json.dumps({"order": f"o{s}{i}{j}"}))
                    for j in range(self.rng.randint(1, 2))
                ]
                for i in range(self.rng.randint(1, 3))
            ]
            session = _ServerSession(f"sess_{s}", f"turn_{s}", steps)
            self.sessions[session.id] = session
            self.subscribers[session.id] = []
            self.at(self.rng.uniform(0.0, 0.05), lambda session=session: self._next_step(session))

    def _next_step(self, session: _ServerSession) -> None:
        if session.cancelled:
            return
        session.step += 1
        if session.step >= len(session.steps):
            session.status = "idle"
            self._publish(session, "turn_completed")
            return
        session.status = "requires_action"
        for j, (name, arguments) in enumerate(session.steps[session.step]):
            key = CallKey(session.id, session.turn_id, f"call_{session.step}_{j}")
            early = self.chance(self.faults.early_announce)
            call = _ServerCall(key, name, arguments, self.now + (0.05 if early else 0.0))
            if self.chance(self.faults.unstorable_id):
                self.unstorable.add(key)
            session.pending[key.call_id] = call
            session.announced.append(call)
            self._publish(session, "call", call)
        if self.chance(self.faults.cancel_turn):
            self.later(0.0, 0.5, lambda: self._cancel(session))

    def _cancel(self, session: _ServerSession) -> None:
        if session.status != "requires_action" or not self.chaos:
            return
        session.cancelled = True
        session.pending.clear()
        session.status = "idle"
        self._publish(session, "turn_completed")

    def snapshot(self, session_id: str) -> Session:
        session = self.sessions[session_id]
        actions = [
            FunctionCallAction.model_construct(
                type="function_call",
                turn_id=call.key.turn_id,
                call_id=call.key.call_id,
                name=call.name,
                arguments=call.arguments,
            )
            for call in session.pending.values()
        ]
        return Session.model_construct(
            id=session.id, status=session.status, required_actions=actions
        )

    def post(self, session_id: str, events: list[dict[str, Any]], key: str) -> None:
        """The result table of execution-tools.md, atomically per batch."""
        session = self.sessions[session_id]
        if self.chance(self.faults.post_5xx):
            raise _status(InternalServerError, 503, "execution_unavailable", "Try again.")
        if self.chance(self.faults.post_redirect):
            raise _status(APIStatusError, 307, None, "Temporary redirect")
        if self.chance(self.faults.post_pending_409):
            raise _status(
                ConflictError,
                409,
                "conflict_error",
                "Earlier input to this Session is still pending.",
            )
        body = json.dumps(events, sort_keys=True)
        if key in session.idempotency:
            if session.idempotency[key] != body:
                raise _status(ConflictError, 409, "idempotency_conflict", "Key reused.")
            return
        for event in events:
            call_id = event["call_id"]
            key = CallKey(session_id, event["turn_id"], call_id)
            if key in self.unstorable:
                if event["success"]:
                    raise Violation(f"seed {self.seed}: unrecordable {call_id} got a success")
                continue  # nothing can be saved for it: a failure is posted unsaved
            saved = self.store.get(key)
            if saved is None or saved.result != event:
                raise Violation(
                    f"seed {self.seed}: posted a result for {call_id} not saved as sent"
                )
            if call_id in session.results:
                if session.results[call_id] != event:
                    raise _status(
                        ConflictError,
                        409,
                        "conflict_error",
                        "The tool call already has a different result.",
                    )
                continue
            pending = session.pending.get(call_id)
            if pending is None and session.cancelled:
                raise _status(
                    ConflictError,
                    409,
                    "conflict_error",
                    "The Turn cannot accept this input in its current state.",
                )
            if pending is None or pending.accept_at > self.now:
                raise _status(
                    BadRequestError, 400, "invalid_request_error", "Unknown pending tool call."
                )
        session.idempotency[key] = body
        for event in events:
            call_id = event["call_id"]
            if call_id in session.results:
                continue
            session.results[call_id] = event
            call = session.pending.pop(call_id)
            self._publish(session, "output", call)
        if not session.pending and session.status == "requires_action":
            session.status = "running"
            self.later(0.0, 0.05, lambda: self._next_step(session))

    def _publish(self, session: _ServerSession, kind: str, call: _ServerCall | None = None) -> None:
        for subscriber in list(self.subscribers[session.id]):
            if not subscriber.connected:
                continue
            event = _stream_event(session, kind, call)
            copies = 2 if self.chance(self.faults.stream_dup) else 1
            for _ in range(copies):
                subscriber.worker.deliver(
                    self.rng.uniform(0.001, 0.02), Received(subscriber.serve_id, event)
                )
            if self.chance(self.faults.stream_drop):
                self._drop(subscriber)

    def _drop(self, subscriber: _Subscriber) -> None:
        subscriber.connected = False
        subscriber.worker.deliver(0.001, Dropped(subscriber.serve_id))

        def reconnect() -> None:
            if subscriber.worker.alive and subscriber.serve_id in subscriber.worker.core.serves:
                subscriber.connected = True
                subscriber.worker.deliver(0.001, Connected(subscriber.serve_id))

        self.later(0.05, 0.5, reconnect)

    def subscribe(self, worker: SimWorker, session_id: str, serve_id: int) -> None:
        subscriber = _Subscriber(worker, serve_id)
        self.subscribers[session_id].append(subscriber)
        worker.deliver(self.rng.uniform(0.001, 0.05), Connected(serve_id))

    # -- the whole history -------------------------------------------------------------------

    def run(self) -> None:
        for _ in range(self.rng.randint(1, 3)):
            self.start_worker()
        self.run_until(8.0)
        # Chaos ends: every worker dies, nothing fails any more, and one clean worker
        # settles everything that is left, as an operator's restart would.
        self.chaos = False
        for worker in self.workers:
            worker.crash()
        self.run_until(self.now + LEASE_SECONDS * 1.5)
        final = self.start_worker(final=True)
        self.run_until(self.now + 60.0, stop=lambda: not final.serving)
        if final.serving:
            raise Violation(f"seed {self.seed}: the final serve did not settle within 60 s")

    def start_worker(self, *, final: bool = False) -> SimWorker:
        worker = SimWorker(self, next(self.generation), final=final)
        self.workers.append(worker)
        worker.start()
        return worker

    def check(self) -> None:
        """The runner's promises, over every crash and worker of this history."""
        reported: set[CallKey] = set()
        for report in self.reports:
            reported.update(report.rejected, report.conflicts, report.in_doubt, report.abandoned)
        for session in self.sessions.values():
            for call in session.announced:
                call_id = call.key.call_id
                runs = self.runs[call.key]
                limit = 1 if call.name == "charge" else MAX_ATTEMPTS
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
                    self._check_late(call, runs, record.late_outcome)
                if accepted is None:
                    if call_id in session.pending and call.key not in reported:
                        raise Violation(
                            f"seed {self.seed}: {call_id} is still pending and nobody reported it"
                        )
                    continue
                if record is None or record.result != accepted:
                    raise Violation(
                        f"seed {self.seed}: the server holds a result for {call_id} that differs "
                        "from the saved one"
                    )
                if accepted["success"] and accepted.get("output", "").startswith(call.name):
                    if runs < 1:
                        raise Violation(f"seed {self.seed}: {call_id} succeeded without running")
                elif (
                    not accepted["success"]
                    and accepted["error"] == IN_DOUBT_ERROR
                    and call.name == "reserve"
                    and record.attempts < MAX_ATTEMPTS
                ):
                    raise Violation(
                        f"seed {self.seed}: idempotent {call_id} failed in doubt after "
                        f"{record.attempts} attempts"
                    )

    def _check_late(self, call: _ServerCall, runs: int, late: dict[str, Any]) -> None:
        """A late outcome is what a function that ran past its timeout produced."""
        produced = late.get("success") is True and late.get("output", "").startswith(call.name)
        ended = late.get("success") is False and late.get("error") == ENDED_WITHOUT_RESULT
        if self.timeout is None or runs < 1 or not (produced or ended):
            raise Violation(
                f"seed {self.seed}: {call.key.call_id} (timeout {self.timeout}, {runs} runs) "
                f"kept a late outcome its function did not produce: {late}"
            )


class SimWorker:
    """One runner process: the real core, driven the way the real drivers drive it."""

    def __init__(self, world: World, generation: int, *, final: bool) -> None:
        self.world = world
        self.generation = generation
        self.final = final
        self.alive = True
        registry = FunctionRegistry()
        timeout = world.timeout
        registry.add(describe_function(self._effect("charge"), name="charge", timeout=timeout))
        registry.add(
            describe_function(
                self._effect("reserve"), name="reserve", idempotent=True, timeout=timeout
            )
        )
        hook_style = world.rng.choice(("none", "none", "raises", "result"))
        self.hook: Callable[[InDoubtCall], InDoubtDecision] | None = {
            "none": None,
            "raises": _raising_hook,
            "result": _checking_hook,
        }[hook_style]
        self.core = RunnerCore(
            registry,
            owner=f"sim-{generation}",
            lease_seconds=LEASE_SECONDS,
            max_concurrency=world.rng.randint(1, 4),
            unknown_functions="leave",
            poll_interval=0.3,
            in_doubt_hook=self.hook is not None,
            action_hook=False,
        )
        if world.mutate is not None:
            world.mutate(self.core)
        self.hooks = Hooks(error_formatter=None, on_error=None)
        self.inbox: list[Message] = []
        self.pump_at: float | None = None
        #: Workers' clocks disagree: leases must be judged by the store's clock alone.
        self.skew = world.rng.uniform(-1000.0, 1000.0)
        self.rate = world.rng.uniform(0.98, 1.02)

    def clock(self) -> float:
        """This worker's monotonic clock: its own origin, and a rate a little off."""
        return self.skew + self.world.now * self.rate

    @property
    def serving(self) -> bool:
        return self.alive and bool(self.core.serves)

    def _effect(self, name: str) -> Callable[[str], str]:
        def function(order: str) -> str:
            """Charge or reserve an order: the effect is counted when it runs."""
            call = current_call()
            self.world.runs[CallKey(call.session_id, call.turn_id, call.call_id)] += 1
            return f"{name}d {order}"

        function.__name__ = name
        return function

    def start(self) -> None:
        for session_id in self.world.sessions:
            self._serve(session_id)

    def _serve(self, session_id: str) -> None:
        if not self.alive:
            return
        serve = self.core.attach(session_id, "idle", self.clock())
        deadline = self.world.now + (60.0 if self.final else self.world.rng.uniform(0.5, 4.0))
        self.world.subscribe(self, session_id, serve.id)
        self.world.at(deadline, lambda: self._deadline(serve))
        self.schedule_pump(0.0)

    def _deadline(self, serve: Serve) -> None:
        if self.alive and serve.id in self.core.serves:
            self._end(serve)

    def _end(self, serve: Serve) -> None:
        self.core.detach(serve, self.clock())
        self.world.reports.append(serve.report)
        if not self.final and self.world.chaos:
            self.world.later(0.05, 0.5, lambda: self._serve(serve.session_id))
        self.schedule_pump(0.0)

    def crash(self) -> None:
        if self.alive:
            self.alive = False
            for serve in self.core.serves.values():
                self.world.reports.append(serve.report)
            self.world.subscribers = {
                sid: [s for s in subs if s.worker is not self]
                for sid, subs in self.world.subscribers.items()
            }

    def deliver(self, delay: float, message: Message) -> None:
        def arrive() -> None:
            if self.alive:
                self.inbox.append(message)
                self.schedule_pump(0.0)

        self.world.at(self.world.now + delay, arrive)

    def schedule_pump(self, delay: float) -> None:
        when = self.world.now + delay
        if self.pump_at is not None and self.pump_at <= when:
            return
        self.pump_at = when
        self.world.at(when, self._pump)

    def _pump(self) -> None:
        if not self.alive or self.pump_at is None or self.pump_at > self.world.now:
            return
        self.pump_at = None
        core, now = self.core, self.clock()
        messages, self.inbox = self.inbox, []
        decided = run_round(core, None, messages, now)
        self._check_bookkeeping()
        for serve_id, error in decided.verdicts.items():
            if error is not None and not isinstance(error, RunnerError):
                raise Violation(f"seed {self.world.seed}: a serve raised {error!r}")
            self._end(core.serves[serve_id])
        for effect in decided.effects:
            if self.world.chance(self.world.faults.crash):
                self.crash()
                return
            for store_call in carry(self, [effect]):
                self.world.later(0.0005, 0.01, functools.partial(self._store, store_call))
        if core.serves or core.busy():
            # At least a microsecond: converting between this worker's clock and the
            # world's can round a due time to just ahead of "now" for ever.
            self.schedule_pump(max(core.next_wakeup(now) / self.rate, 1e-6))

    def _check_bookkeeping(self) -> None:
        """``busy`` is kept incrementally; it must agree with a scan of every call."""
        scanned = {
            call.key.session_id
            for call in self.core.calls.values()
            if call.phase not in (Phase.POSTED, Phase.DONE)
        }
        for session_id in self.world.sessions:
            if self.core.busy(session_id) != (session_id in scanned):
                raise Violation(
                    f"seed {self.world.seed}: busy({session_id}) disagrees with a scan of its calls"
                )

    # -- carrying out effects (the sim is a Carrier) --------------------------------------

    def _run_function(self, effect: RunFunction) -> None:
        self.world.later(0.0, 0.005, lambda: self._run(effect))

    def _cancel_function(self, effect: CancelFunction) -> None:
        return  # the simulated functions finish at once

    def _post_results(self, effect: PostResults) -> None:
        self.world.later(0.001, 0.03, lambda: self._post(effect))

    def _read_session(self, effect: ReadSession) -> None:
        self.world.later(0.001, 0.03, lambda: self._read(effect))

    def _ask_in_doubt(self, effect: AskInDoubt) -> None:
        assert self.hook is not None
        answer = ask_in_doubt(self.hook, effect)
        self.deliver(self.world.rng.uniform(0.0, 0.01), answer)

    def _report_action(self, effect: ReportAction) -> None:
        return  # the simulated Sessions require no other actions

    def _store(self, effect: StoreEffect) -> None:
        world = self.world
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
        self.deliver(world.rng.uniform(0.0005, 0.3 if slow else 0.01), answer)

    def _run(self, effect: RunFunction) -> None:
        if not self.alive:
            return  # killed before the function started: no effect
        world = self.world
        outcome = call_sync(effect, self.hooks, effect.context())
        if world.chance(world.faults.function_exit):
            outcome = FunctionOutcome(effect.key, None)  # SystemExit after the effect
        self.deliver(world.rng.uniform(0.001, 0.2), outcome)

    def _post(self, effect: PostResults) -> None:
        world = self.world
        batch = effect.batch
        error: Exception | None = None
        try:
            world.post(batch.session_id, batch.events, batch.idempotency_key)
        except Violation:
            raise
        except Exception as exc:
            error = exc
        if error is None and world.chance(world.faults.post_lost):
            error = APIConnectionError(request=_REQUEST)  # applied, answer lost
        self.deliver(world.rng.uniform(0.001, 0.03), PostOutcome(batch, error))

    def _read(self, effect: ReadSession) -> None:
        world = self.world
        if world.chance(world.faults.read_error):
            answer = SessionOutcome(
                effect.session_id, None, error=APIConnectionError(request=_REQUEST)
            )
        else:
            answer = SessionOutcome(effect.session_id, world.snapshot(effect.session_id))
        self.deliver(world.rng.uniform(0.001, 0.03), answer)


def _raising_hook(call: InDoubtCall) -> InDoubtDecision:
    raise RuntimeError("the application's hook is broken")


def _checking_hook(call: InDoubtCall) -> InDoubtDecision:
    return InDoubtDecision.result("checked by the application")


def _status(
    kind: type[APIStatusError], status: int, code: str | None, message: str
) -> APIStatusError:
    response = httpx.Response(status, request=_REQUEST)
    body = {"error": {"type": code or "error", "code": code, "message": message, "param": None}}
    return kind(message, response=response, body=body)


def _stream_event(session: _ServerSession, kind: str, call: _ServerCall | None) -> Any:
    if kind == "turn_completed":
        return TurnCompletedEvent.model_construct(
            type="agent.session.turn.completed", session_id=session.id, turn_id=session.turn_id
        )
    assert call is not None
    if kind == "call":
        item = FunctionCallItem.model_construct(
            type="function_call",
            turn_id=session.turn_id,
            call_id=call.key.call_id,
            name=call.name,
            arguments=call.arguments,
            status="completed",
        )
        return ItemDoneEvent.model_construct(
            type="agent.session.turn.item.done",
            session_id=session.id,
            turn_id=session.turn_id,
            item=item,
        )
    output = FunctionCallOutputItem.model_construct(
        type="function_call_output", turn_id=session.turn_id, call_id=call.key.call_id
    )
    return ItemAddedEvent.model_construct(
        type="agent.session.turn.item.added",
        session_id=session.id,
        turn_id=session.turn_id,
        item=output,
    )


def run_seed(seed: int, *, mutate: Callable[[RunnerCore], None] | None = None) -> World:
    """Run one seed's whole history and check it; raises :class:`Violation`."""
    world = World(seed, mutate=mutate)
    world.run()
    world.check()
    return world
