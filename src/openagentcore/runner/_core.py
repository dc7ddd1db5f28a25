"""The runner's decisions, shared by the sync and async runners.

Nothing here touches the network. The drivers (``_sync.py``, ``_async.py``) feed it
what they observe (events, Session reads, finished calls, submission outcomes) and do
the I/O it asks for. Store calls are synchronous; the async driver runs each core call
in a worker thread, one at a time, so the core never runs concurrently with itself.

Order of writes for one call: claim (``started``) before the function runs; save the
result (``completed``) before it is posted; ``submitted`` after a 202; ``applied`` when
its ``function_call_output`` Item appears.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import APIConnectionError, APIStatusError, BadRequestError, ConflictError
from ..store import (
    CallKey,
    CallRecord,
    CallState,
    Claim,
    ResultStore,
    StoreUnavailableError,
    arguments_hash,
)
from ..types import (
    FunctionCallAction,
    FunctionCallItem,
    FunctionCallOutputItem,
    ItemAddedEvent,
    ItemDoneEvent,
    MessageItem,
    RequiredAction,
    Session,
    SessionEvent,
    SessionSnapshotEvent,
    TerminalTurnEvent,
)
from ._leases import LeaseKeeper
from ._registry import ArgumentsError, FunctionRegistry, RegisteredFunction
from ._report import ServeReport
from ._results import IN_DOUBT_ERROR, INTERNAL_ERROR, ErrorFormatter, failure_event, success_event

__all__ = [
    "Batch",
    "InDoubtCall",
    "InDoubtDecision",
    "Job",
    "PendingCall",
    "RunnerCore",
    "SessionState",
]

logger = logging.getLogger("openagentcore.runner")

MAX_BATCH = 64
#: The server may announce a call (its Item) a moment before it can accept the result;
#: such a result gets 400 "Unknown pending tool call.". Retry it this many times.
UNKNOWN_CALL_RETRIES = 8
UNKNOWN_CALL_DELAY = 0.05
_TERMINAL_STATUSES = frozenset({"idle", "failed"})
_UNKNOWN_CALL = "unknown pending tool call"
_OTHER_TURN = "belongs to a different turn"
_DIFFERENT_RESULT = "already has a different result"
_CANNOT_ACCEPT = "cannot accept this input"
#: Remember this many non-function actions already reported, per Session.
_REPORTED_ACTIONS_LIMIT = 1024
#: Progress marks are written when this many are queued, or this many seconds after the
#: oldest, or when serving ends.
MARK_BATCH = 64
MARK_DELAY = 0.5
#: While the store is unreachable, try it again after this many seconds, doubling up to
#: the cap: a database restart takes seconds, and nothing is lost by waiting.
STORE_RETRY_DELAY = 0.1
STORE_RETRY_MAX_DELAY = 5.0


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A function call the server is waiting on."""

    key: CallKey
    name: str
    arguments: object

    @classmethod
    def from_action(cls, session_id: str, action: FunctionCallAction) -> PendingCall:
        return cls(
            CallKey(session_id, action.turn_id, action.call_id), action.name, action.arguments
        )

    @classmethod
    def from_item(cls, session_id: str, turn_id: str, item: FunctionCallItem) -> PendingCall:
        return cls(CallKey(session_id, turn_id, item.call_id), item.name, item.arguments)


@dataclass(frozen=True, slots=True)
class InDoubtCall:
    """Given to ``on_in_doubt``: a call that started earlier but left no saved result."""

    key: CallKey
    function_name: str
    arguments: object
    attempts: int


@dataclass(frozen=True, slots=True)
class InDoubtDecision:
    """What to do with a call in doubt; build one with the class methods."""

    kind: Literal["rerun", "fail", "result"]
    value: object = None
    error: str = IN_DOUBT_ERROR

    @classmethod
    def rerun(cls) -> InDoubtDecision:
        """Run the function again: only safe when repeating its effect is harmless."""
        return cls("rerun")

    @classmethod
    def fail(cls, error: str = IN_DOUBT_ERROR) -> InDoubtDecision:
        """Submit a failed result with ``error`` (the default policy)."""
        return cls("fail", error=error)

    @classmethod
    def result(cls, value: object) -> InDoubtDecision:
        """Submit ``value`` as the successful result, e.g. after checking the effect."""
        return cls("result", value=value)


InDoubtHandler = Callable[[InDoubtCall], InDoubtDecision]
ActionHandler = Callable[[str, RequiredAction], None]
ErrorHook = Callable[[CallKey, BaseException], None]


@dataclass(frozen=True, slots=True)
class Job:
    """A function to run for one call; the driver runs it in a thread or a task."""

    call: PendingCall
    function: RegisteredFunction


@dataclass(frozen=True, slots=True)
class Batch:
    """Saved results to post together in one ``events.create`` request."""

    session_id: str
    records: tuple[CallRecord, ...]

    @property
    def events(self) -> list[dict[str, Any]]:
        return [record.result for record in self.records if record.result is not None]

    @property
    def idempotency_key(self) -> str:
        """A single result uses its call's stored key; a batch, a key derived from its
        calls, so a retry of the same batch is the same request."""
        if len(self.records) == 1:
            return self.records[0].idempotency_key
        joined = "\n".join(record.idempotency_key for record in self.records)
        return "oac-b-" + hashlib.sha256(joined.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Step:
    """The next move of a driver's loop (see :meth:`RunnerCore.next_step`)."""

    finish: bool = False
    reconcile: bool = False
    wait: float = 0.0


class SubmitOutcome(enum.Enum):
    RETRY_SOON = "retry_soon"
    RETRY_LATER = "retry_later"
    SETTLED = "settled"


@dataclass(slots=True)
class SessionState:
    """What one ``serve``/``run_turn`` knows about its Session."""

    session_id: str
    report: ServeReport
    in_flight: set[CallKey] = field(default_factory=set)
    ready: list[CallRecord] = field(default_factory=list)
    #: Results waiting to be retried after a short delay: (monotonic not-before, record).
    delayed: list[tuple[float, CallRecord]] = field(default_factory=list)
    retries: dict[CallKey, int] = field(default_factory=dict)
    status: str | None = None
    #: The Turn ``run_turn`` waits for, and whether it has ended.
    target_turn: str | None = None
    target_turn_status: str | None = None
    #: Its finished messages as the stream delivered them, whether its end came through
    #: the stream, and the reconnects counted when it started (see ``streamed_answer``).
    turn_messages: list[MessageItem] = field(default_factory=list)
    turn_end_seen: bool = False
    reconnects_at_turn_start: int = 0
    reported_actions: OrderedDict[str, None] = field(default_factory=OrderedDict)
    #: Calls whose result the server accepted (202) in this serve and that were not yet
    #: seen applied: a repeated announcement of one is a duplicate, not a reason to send
    #: again.
    accepted: set[CallKey] = field(default_factory=set)
    #: Progress marks not written yet (submitted, applied, abandoned), and when the
    #: oldest was queued. They are bookkeeping, so they are written in batches, off the
    #: path between a call and its result (:meth:`RunnerCore.housekeep`).
    marks: dict[CallKey, CallState] = field(default_factory=dict)
    marks_since: float = 0.0
    #: Function calls the latest Session read lists as pending.
    pending: set[CallKey] = field(default_factory=set)
    #: Pending calls this runner leaves to others: functions it does not serve, a call
    #: in doubt that only a runner knowing the function can resolve, or a call whose
    #: saved result the server refused.
    not_mine: set[CallKey] = field(default_factory=set)
    last_read: float = 0.0
    #: Results of calls that ran while the store was unreachable: (event, owner). They
    #: are saved before they are posted, however long the outage lasts.
    unsaved: dict[CallKey, tuple[dict[str, Any], str | None]] = field(default_factory=dict)
    #: A pending call was skipped because the store was unreachable: read the Session
    #: again once the store may be back.
    recheck: bool = False
    #: Consecutive store failures, and when to try the store again (monotonic).
    store_failures: int = 0
    store_retry_at: float = 0.0

    def busy(self) -> bool:
        return bool(self.in_flight or self.ready or self.delayed or self.unsaved)

    def streamed_answer(self) -> list[MessageItem] | None:
        """The target Turn's messages as streamed, or ``None`` if the stream may have
        missed some (it dropped, or the Turn ended before its events were read)."""
        if self.turn_end_seen and self.report.reconnects == self.reconnects_at_turn_start:
            return self.turn_messages
        return None


class RunnerCore:
    """Decisions for every Session a runner serves."""

    def __init__(
        self,
        registry: FunctionRegistry,
        store: ResultStore,
        *,
        owner: str,
        lease_seconds: float,
        unknown_functions: Literal["leave", "fail"],
        error_formatter: ErrorFormatter | None,
        on_error: ErrorHook | None,
        on_in_doubt: InDoubtHandler | None,
        on_action: ActionHandler | None,
    ) -> None:
        self.registry = registry
        self.store = store
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.unknown_functions = unknown_functions
        self.error_formatter = error_formatter
        self.on_error = on_error
        self.on_in_doubt = on_in_doubt
        self.on_action = on_action
        #: Calls this runner holds (running, or finished with the result not saved yet),
        #: across all its Sessions; their leases are renewed in the background.
        self.leases = LeaseKeeper(store, owner=owner, lease_seconds=lease_seconds)

    # -- observing the server -------------------------------------------------------

    def on_event(self, state: SessionState, event: SessionEvent) -> list[Job]:
        """Update ``state`` from one stream event; return the functions to start."""
        if isinstance(event, SessionSnapshotEvent):
            return self.on_session(state, event.session)
        if isinstance(event, (ItemAddedEvent, ItemDoneEvent)):
            item = event.item
            if isinstance(item, FunctionCallOutputItem):
                key = CallKey(state.session_id, item.turn_id, item.call_id)
                if key in state.accepted:
                    state.accepted.discard(key)
                    self._queue_mark(state, key, CallState.APPLIED)
                else:
                    self._mark_applied(state, key)
                return []
            if (
                isinstance(item, MessageItem)
                and isinstance(event, ItemDoneEvent)
                and item.turn_id is not None
                and item.turn_id == state.target_turn
            ):
                state.turn_messages.append(item)
                return []
            if isinstance(item, FunctionCallItem) and _is_complete_call(event, item):
                turn_id = item.turn_id or event.turn_id
                if turn_id:
                    return self._consider(
                        state, [PendingCall.from_item(state.session_id, turn_id, item)]
                    )
            return []
        if isinstance(event, TerminalTurnEvent) and event.turn_id == state.target_turn:
            state.target_turn_status = event.turn.status
            state.turn_end_seen = True
        return []

    @staticmethod
    def touches_store(state: SessionState, event: SessionEvent) -> bool:
        """Whether :meth:`on_event` may read or write the store for ``event``: most
        events (text deltas, Turn progress, our own results applied) do not, and need
        no worker thread."""
        if isinstance(event, SessionSnapshotEvent):
            return True
        if not isinstance(event, (ItemAddedEvent, ItemDoneEvent)):
            return False
        item = event.item
        if isinstance(item, FunctionCallOutputItem):
            return CallKey(state.session_id, item.turn_id, item.call_id) not in state.accepted
        return isinstance(item, FunctionCallItem)

    def on_session(self, state: SessionState, session: Session) -> list[Job]:
        """Reconcile against a Session snapshot: its ``required_actions`` are the truth."""
        state.status = session.status
        state.last_read = time.monotonic()
        state.recheck = False
        if session.status in _TERMINAL_STATUSES and not session.required_actions:
            state.accepted.clear()  # nothing is pending: no announcement can repeat
        calls: list[PendingCall] = []
        for action in session.required_actions:
            if isinstance(action, FunctionCallAction):
                calls.append(PendingCall.from_action(state.session_id, action))
            else:
                self._report_action(state, action)
        state.pending = {call.key for call in calls}
        state.not_mine &= state.pending
        return self._consider(state, calls)

    def on_turn(self, state: SessionState, turn_id: str, status: str) -> None:
        if turn_id == state.target_turn:
            state.target_turn_status = status

    def start_turn(self, state: SessionState, turn_id: str, status: str) -> None:
        """``run_turn`` learned the Turn its input started; no stream event has been
        handled since the input was sent, so the reconnect count is that of the start."""
        state.target_turn = turn_id
        state.target_turn_status = status
        state.reconnects_at_turn_start = state.report.reconnects

    def done(self, state: SessionState, until: Literal["idle", "turn", "forever"]) -> bool:
        if until == "forever" or state.busy() or state.recheck:
            return False
        if until == "turn":
            return state.target_turn_status in ("completed", "failed", "cancelled", "incomplete")
        if state.status == "requires_action":
            # Waiting only on what this runner cannot do (other functions, approvals,
            # an Environment): serving longer would change nothing.
            return state.pending <= state.not_mine
        return state.status in _TERMINAL_STATUSES

    def next_step(
        self,
        state: SessionState,
        until: Literal["idle", "turn", "forever", "connected"],
        *,
        connected: bool,
        stopping: bool,
        poll_interval: float,
        deadline: float | None,
    ) -> Step:
        """What a driver's loop does next: finish, re-read the Session, or wait."""
        if until == "connected":
            if connected:
                return Step(finish=True)
        elif self.done(state, until):
            state.report.final_status = state.status
            return Step(finish=True)
        if stopping and not state.busy():
            return Step(finish=True)
        now = time.monotonic()
        poll_in = self.poll_due(state, poll_interval, now)
        if state.recheck:
            # A call was skipped while the store was down: read the Session when it may
            # be back.
            poll_in = min(poll_in, max(0.0, state.store_retry_at - now))
        if poll_in == 0:
            return Step(reconcile=True)
        # poll_in is at most poll_interval, which bounds every wait without an event.
        delay = self.next_delay(state, now)
        wait = poll_in if delay is None else min(poll_in, delay)
        if state.marks:
            wait = min(wait, max(0.0, state.marks_since + MARK_DELAY - now))
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"Session {state.session_id} was not settled in time")
            wait = min(wait, left)
        return Step(wait=wait)

    def housekeeping_due(self, state: SessionState) -> bool:
        """Whether :meth:`housekeep` has work: results the store refused may be saved
        now, or progress marks are due."""
        now = time.monotonic()
        return bool(state.unsaved and now >= state.store_retry_at) or self._marks_due(state, now)

    def housekeep(self, state: SessionState) -> None:
        """Save results the store refused, and write due progress marks."""
        now = time.monotonic()
        if state.unsaved and now >= state.store_retry_at:
            for key, (event, owner) in list(state.unsaved.items()):
                if not self._save(state, key, event, owner):
                    break
                del state.unsaved[key]
        if self._marks_due(state, now):
            self.flush_marks(state)

    def poll_due(self, state: SessionState, interval: float, now: float | None = None) -> float:
        """Seconds until the Session should be read again (0: now).

        While the Session waits on calls other workers hold, no event may come for a
        long time; reading it now and then notices a worker that died.
        """
        if state.status != "requires_action" or state.busy():
            return interval
        now = time.monotonic() if now is None else now
        return max(0.0, state.last_read + interval - now)

    # -- the store going away ---------------------------------------------------------

    def _store_failed(self, state: SessionState, doing: str, error: StoreUnavailableError) -> None:
        """Back off before the next attempt; the caller keeps what it could not write."""
        delay = min(STORE_RETRY_MAX_DELAY, STORE_RETRY_DELAY * 2 ** min(state.store_failures, 16))
        state.store_failures += 1
        state.store_retry_at = time.monotonic() + delay
        state.report.store_errors += 1
        logger.warning(
            "Result store unavailable while %s for Session %s; retrying in %.1f s: %s",
            doing,
            state.session_id,
            delay,
            error,
        )

    def _store_ok(self, state: SessionState) -> None:
        state.store_failures = 0

    def _save(
        self, state: SessionState, key: CallKey, event: dict[str, Any], owner: str | None
    ) -> bool:
        """Save a result and queue it for posting; if the store is unreachable keep it in
        ``state.unsaved`` (never post a result that is not saved). Returns whether saved."""
        try:
            # save_result keeps the first saved result: if another worker saved one
            # first, that is the one to post.
            record = self.store.save_result(key, event, owner=owner)
        except StoreUnavailableError as exc:
            state.unsaved[key] = (event, owner)
            self._store_failed(state, f"saving the result of {key.call_id}", exc)
            return False
        self._store_ok(state)
        self.leases.release(key)
        state.ready.append(record)
        return True

    def _queue_mark(self, state: SessionState, key: CallKey, to: CallState) -> None:
        if not state.marks:
            state.marks_since = time.monotonic()
        state.marks[key] = to  # a later mark (applied) supersedes an earlier one

    def _marks_due(self, state: SessionState, now: float) -> bool:
        return bool(state.marks) and (
            len(state.marks) >= MARK_BATCH or now - state.marks_since >= MARK_DELAY
        )

    def flush_marks(self, state: SessionState) -> None:
        """Write the queued progress marks in one transaction; if the store is
        unreachable they stay queued."""
        if not state.marks:
            return
        try:
            self.store.mark_many(list(state.marks.items()))
        except StoreUnavailableError as exc:
            self._store_failed(state, "writing progress marks", exc)
            return
        state.marks.clear()

    # -- deciding ---------------------------------------------------------------------

    def _consider(self, state: SessionState, calls: Iterable[PendingCall]) -> list[Job]:
        jobs = []
        for call in calls:
            try:
                job = self._decide(state, call)
            except StoreUnavailableError as exc:
                # The call stays pending on the server; decide it on a later read.
                state.recheck = True
                self._store_failed(state, f"deciding call {call.key.call_id}", exc)
                continue
            self._store_ok(state)
            if job is not None:
                jobs.append(job)
        return jobs

    def _decide(self, state: SessionState, call: PendingCall) -> Job | None:
        report = state.report
        if (
            call.key in state.in_flight
            or call.key in state.unsaved
            or any(record.key == call.key for record in state.ready)
            or any(record.key == call.key for _, record in state.delayed)
        ):
            report.duplicates_skipped += 1
            return None
        function = self.registry.get(call.name)
        if function is None:
            return self._unknown_function(state, call)
        # Claim straight away: a lost claim returns the existing record, so a new call
        # costs one store round trip, not a read and then a claim.
        claim = self._claim(call)
        if claim.won:
            self._begin(state, call.key)
            return Job(call, function)
        return self._decide_existing(state, call, function, claim.record)

    def _decide_existing(
        self,
        state: SessionState,
        call: PendingCall,
        function: RegisteredFunction,
        record: CallRecord,
    ) -> Job | None:
        report = state.report
        if record.state in (CallState.APPLIED, CallState.ABANDONED):
            report.duplicates_skipped += 1
            return None
        if record.has_result():
            self._resubmit(state, call, record)
            return None
        if record.state is CallState.STARTED and not self.store.is_stale(record):
            if record.owner == self.owner and not self.leases.holds(call.key):
                # Our own claim that nothing here runs: the claim committed but the store
                # could not confirm it (e.g. the connection broke). The function never
                # started, so this is the first run, not a repeat.
                self._begin(state, call.key)
                return Job(call, function)
            report.duplicates_skipped += 1  # another worker holds a live claim
            return None
        return self._in_doubt(state, call, function, record)

    def _resubmit(self, state: SessionState, call: PendingCall, record: CallRecord) -> None:
        """Send a saved result again instead of running the function again."""
        if call.key in state.accepted:
            state.report.duplicates_skipped += 1  # accepted in this serve; wait for it
            return
        state.ready.append(record)
        state.report.results_resubmitted += 1

    def _in_doubt(
        self,
        state: SessionState,
        call: PendingCall,
        function: RegisteredFunction,
        record: CallRecord,
    ) -> Job | None:
        if record.state is CallState.STARTED:
            self.store.mark(call.key, CallState.IN_DOUBT)
        if call.key not in state.report.in_doubt:
            state.report.in_doubt.append(call.key)
        if function.idempotent:
            decision = InDoubtDecision.rerun()
        elif self.on_in_doubt is not None:
            decision = self.on_in_doubt(
                InDoubtCall(call.key, call.name, call.arguments, record.attempts)
            )
        else:
            decision = InDoubtDecision.fail()
        logger.warning(
            "Call %s of %s is in doubt (started, no saved result); resolving with %s",
            call.key.call_id,
            call.name,
            decision.kind,
        )
        if decision.kind == "rerun":
            claim = self.store.take_over(
                call.key,
                owner=self.owner,
                lease_seconds=self.lease_seconds,
                expected_attempts=record.attempts,
            )
            if claim.won:
                self._begin(state, call.key)
                return Job(call, function)
            return self._decide_existing(state, call, function, claim.record)
        if decision.kind == "result":
            event = success_event(call.key, decision.value)
        else:
            event = failure_event(call.key, decision.error)
        self._save(state, call.key, event, owner=None)
        return None

    def _unknown_function(self, state: SessionState, call: PendingCall) -> Job | None:
        """A call to a function this runner does not serve.

        A result another runner saved is still resubmitted (that is how
        ``openagentcore recover`` settles a Session without the application's code);
        a call in doubt is reported but left to a runner that knows the function.
        """
        record = self.store.get(call.key)
        if record is not None:
            if record.state in (CallState.APPLIED, CallState.ABANDONED):
                state.report.duplicates_skipped += 1
                return None
            if record.has_result():
                self._resubmit(state, call, record)
                return None
            if record.state is CallState.IN_DOUBT or self.store.is_stale(record):
                if call.key not in state.report.in_doubt:
                    state.report.in_doubt.append(call.key)
                state.not_mine.add(call.key)
                return None
        if self.unknown_functions == "leave" or record is not None:
            if call.key not in state.report.left_pending:
                state.report.left_pending.append(call.key)
            state.not_mine.add(call.key)
            return None
        claim = self._claim(call)
        if claim.won:
            error = f"No function named {call.name!r} is served here."
            self._save(state, call.key, failure_event(call.key, error), self.owner)
        return None

    def _report_action(self, state: SessionState, action: RequiredAction) -> None:
        ident = getattr(action, "request_id", None) or getattr(action, "environment_id", None)
        ident = f"{action.type}:{ident}"
        if ident in state.reported_actions:
            return
        state.reported_actions[ident] = None
        if len(state.reported_actions) > _REPORTED_ACTIONS_LIMIT:
            state.reported_actions.popitem(last=False)
        if self.on_action is not None:
            self.on_action(state.session_id, action)
        else:
            logger.info(
                "Session %s requires a %s action; this runner only serves function calls",
                state.session_id,
                action.type,
            )

    # -- running -----------------------------------------------------------------------

    def execute(self, job: Job) -> dict[str, Any]:
        """Bind arguments and call a sync function; returns the result event.

        Runs in a worker thread. It never raises for the function's own errors: those
        become failed results.
        """
        try:
            args, kwargs = job.function.bind(job.call.arguments)
        except ArgumentsError as exc:
            return failure_event(job.call.key, str(exc))
        try:
            value = job.function.func(*args, **kwargs)
        except Exception as exc:
            return self.failed(job, exc)
        return self._succeeded(job, value)

    async def execute_async(self, job: Job) -> dict[str, Any]:
        """The coroutine-function twin of :meth:`execute`."""
        try:
            args, kwargs = job.function.bind(job.call.arguments)
        except ArgumentsError as exc:
            return failure_event(job.call.key, str(exc))
        try:
            value = await job.function.func(*args, **kwargs)
        except Exception as exc:
            return self.failed(job, exc)
        return self._succeeded(job, value)

    def _succeeded(self, job: Job, value: object) -> dict[str, Any]:
        """The result event for a returned value. A value that cannot be sent fails the
        call: the function did run, so leaving it without a result would put it in
        doubt (and re-run an idempotent one forever)."""
        try:
            return success_event(job.call.key, value)
        except (TypeError, ValueError) as exc:
            logger.error(
                "Function %s returned a %s, which cannot be sent as a result; return str, "
                "JSON-compatible data, a pydantic model or content parts",
                job.function.name,
                type(value).__name__,
            )
            return self.failed(job, exc)

    def failed(self, job: Job, exc: Exception) -> dict[str, Any]:
        logger.debug("Function %s raised %s", job.function.name, type(exc).__name__)
        if self.on_error is not None:
            try:
                self.on_error(job.call.key, exc)
            except Exception:
                logger.exception("on_error hook raised; ignoring it")
        text = INTERNAL_ERROR
        if self.error_formatter is not None:
            try:
                text = self.error_formatter(exc)
            except Exception:
                logger.exception("error_formatter raised; sending the generic error text")
        return failure_event(job.call.key, text)

    def finished(self, state: SessionState, key: CallKey, event: dict[str, Any]) -> None:
        """Save a finished call's result; it is posted with the next batch."""
        self._end(state, key)
        state.report.calls_run += 1
        if event.get("success") is False:
            state.report.function_errors += 1
        self._save(state, key, event, self.owner)

    def crashed(self, state: SessionState, key: CallKey) -> None:
        """A job ended without a result (e.g. SystemExit): it may have had its effect.
        If the mark cannot be written, the claim's lease lapses and says the same."""
        self._end(state, key)
        self.leases.release(key)
        try:
            self.store.mark(key, CallState.IN_DOUBT)
        except StoreUnavailableError as exc:
            self._store_failed(state, f"marking {key.call_id} in doubt", exc)

    def _claim(self, call: PendingCall) -> Claim:
        return self.store.claim(
            call.key,
            function_name=call.name,
            arguments_hash=arguments_hash(call.arguments),
            owner=self.owner,
            lease_seconds=self.lease_seconds,
        )

    def _begin(self, state: SessionState, key: CallKey) -> None:
        state.in_flight.add(key)
        self.leases.hold(key)

    def _end(self, state: SessionState, key: CallKey) -> None:
        """The function returned; its claim stays held until its result is saved."""
        state.in_flight.discard(key)

    def close(self) -> None:
        self.leases.close()

    # -- submitting --------------------------------------------------------------------

    def take_batches(self, state: SessionState, now: float | None = None) -> list[Batch]:
        now = time.monotonic() if now is None else now
        due = [entry for entry in state.delayed if entry[0] <= now]
        state.delayed = [entry for entry in state.delayed if entry[0] > now]
        records = [record for _, record in due] + state.ready
        state.ready = []
        return [
            Batch(state.session_id, tuple(records[i : i + MAX_BATCH]))
            for i in range(0, len(records), MAX_BATCH)
        ]

    def next_delay(self, state: SessionState, now: float | None = None) -> float | None:
        """Seconds until the next delayed result is due or the store may be tried again
        for an unsaved result, if any."""
        due = [entry[0] for entry in state.delayed]
        if state.unsaved:
            due.append(state.store_retry_at)
        if not due:
            return None
        now = time.monotonic() if now is None else now
        return max(0.0, min(due) - now)

    def submitted(self, state: SessionState, batch: Batch, error: Exception | None) -> list[Batch]:
        """Record a submission's outcome; returns batches to send right away (splits).

        Never touches the store: the marks it makes are queued (see ``flush_marks``)."""
        if error is None:
            for record in batch.records:
                state.retries.pop(record.key, None)
                state.accepted.add(record.key)
                self._queue_mark(state, record.key, CallState.SUBMITTED)
            state.report.results_submitted += len(batch.records)
            return []
        outcome = _classify(error)
        if len(batch.records) > 1 and outcome is not SubmitOutcome.RETRY_LATER:
            # One bad result rejects the whole atomic batch: find it by sending each alone.
            return [Batch(batch.session_id, (record,)) for record in batch.records]
        (record,) = batch.records
        if outcome is SubmitOutcome.RETRY_SOON:
            tries = state.retries.get(record.key, 0)
            if tries < UNKNOWN_CALL_RETRIES:
                state.retries[record.key] = tries + 1
                state.delayed.append((time.monotonic() + UNKNOWN_CALL_DELAY * 2**tries, record))
                return []
            del state.retries[record.key]
            state.report.rejected.append(record.key)
            logger.warning("Result for call %s was never accepted: %s", record.key.call_id, error)
            return []
        if outcome is SubmitOutcome.RETRY_LATER:
            # The server did not answer usefully even after the client's retries. The
            # result stays saved; the next reconciliation sends it again.
            logger.warning("Could not submit result for %s: %s", record.key.call_id, error)
            return []
        state.retries.pop(record.key, None)
        self._settle_refused(state, record, error)
        return []

    def _settle_refused(self, state: SessionState, record: CallRecord, error: Exception) -> None:
        message = _message(error)
        if isinstance(error, ConflictError) and (
            _DIFFERENT_RESULT in message or error.is_idempotency_conflict
        ):
            # The server holds another result for this call. Never overwrite it: surface it.
            state.report.conflicts.append(record.key)
            logger.error(
                "Call %s already has a different result on the server; the saved one was "
                "not applied. Inspect it with `openagentcore calls show`.",
                record.key.call_id,
            )
        elif isinstance(error, ConflictError):
            state.report.abandoned.append(record.key)
        else:
            # Sending the saved result again would be refused again, and it is never
            # replaced: leave the call for a person, so serve can end.
            state.report.rejected.append(record.key)
            state.not_mine.add(record.key)
            logger.error(
                "The server refused the result for call %s: %s. The call stays pending; "
                "inspect it with `openagentcore calls show`.",
                record.key.call_id,
                error,
            )
        self._queue_mark(state, record.key, CallState.ABANDONED)

    def _mark_applied(self, state: SessionState, key: CallKey) -> None:
        """An output Item proves our result was applied only once the server accepted it
        (``SUBMITTED``); before that, the Item carries a result someone else sent."""
        try:
            record = self.store.get(key)
        except StoreUnavailableError as exc:
            self._store_failed(state, f"reading {key.call_id}", exc)
            return
        if record is not None and record.state is CallState.SUBMITTED:
            self._queue_mark(state, key, CallState.APPLIED)


def _message(error: Exception) -> str:
    return str(getattr(error, "message", error)).lower()


def _classify(error: Exception) -> SubmitOutcome:
    if isinstance(error, BadRequestError) and _UNKNOWN_CALL in _message(error):
        return SubmitOutcome.RETRY_SOON
    if isinstance(error, (APIConnectionError,)):
        return SubmitOutcome.RETRY_LATER
    if isinstance(error, APIStatusError) and (
        error.status_code >= 500 or error.status_code in (408, 429)
    ):
        return SubmitOutcome.RETRY_LATER
    return SubmitOutcome.SETTLED


def _is_complete_call(event: ItemAddedEvent | ItemDoneEvent, item: FunctionCallItem) -> bool:
    """A call can run once its arguments are final: on ``item.done``, or an
    ``item.added`` that already reads completed."""
    return isinstance(event, ItemDoneEvent) or item.status == "completed"
