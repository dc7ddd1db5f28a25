"""The runner's decisions, with no I/O: one record per call, effects out, answers in.

Every call a runner handles has exactly one :class:`Call` here, with an explicit
:class:`Phase` and explicit ownership (``lease_held``). Drivers feed the core what they
observe (stream events, Session reads, store answers, function outcomes, POST
outcomes) together with the current monotonic time, and carry out the effects it
returns. The core never calls the store, the client, a clock, a thread or user code,
so a simulator can replay any history of faults from one seed (``tests/sim``).

Order of writes for one call: claim (``started``) before the function runs; save the
result (``completed``) before it is posted; ``submitted`` after a 202; ``applied`` when
its ``function_call_output`` Item appears. A call whose function may have run but left
no saved result is *in doubt* and is never run again unless its function is idempotent
(and then at most ``max_attempts`` times).
"""

from __future__ import annotations

import enum
import json
import logging
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from .._errors import (
    APIConnectionError,
    APIError,
    APIStatusError,
    BadRequestError,
    ConflictError,
    NotFoundError,
    RedirectError,
)
from .._retry import is_retryable_status
from ..store import (
    CallKey,
    CallRecord,
    CallState,
    Claim,
    StoreUnavailableError,
    arguments_hash,
)
from ..store._records import cleared_to_rerun, idempotency_key_for
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
from ._effects import (
    AskInDoubt,
    Batch,
    CallSettled,
    CallStarted,
    CancelFunction,
    ClaimCall,
    Effect,
    FunctionOutcome,
    InDoubtAnswer,
    KeepLateOutcome,
    LogNote,
    Lookup,
    LookupResult,
    MarkInDoubt,
    Note,
    Outcome,
    PostOutcome,
    PostResults,
    ReadSession,
    Release,
    RenewLeases,
    ReportAction,
    RunFunction,
    SaveResult,
    SessionOutcome,
    StoreAnswer,
    TakeOver,
    Verdict,
    WriteMarks,
)
from ._phases import FIRST, Phase, check_move
from ._registry import FunctionRegistry, RegisteredFunction
from ._report import ServeReport
from ._results import (
    ENDED_WITHOUT_RESULT,
    IN_DOUBT_ERROR,
    checked_failure_event,
    failure_event,
    success_event,
    timeout_error,
)
from ._types import PendingCall, RunnerError

__all__ = [
    "Call",
    "ContentKey",
    "Phase",
    "Refusal",
    "RunnerCore",
    "Serve",
    "content_key",
]

MAX_BATCH = 64
#: Longest a saved result waits for others of its Session still being decided, so that
#: they go out in one POST.
BATCH_LINGER = 0.05
#: The server may announce a call (its Item) a moment before it can accept the result;
#: such a result gets 400 "Unknown pending tool call.". Retry it this many times.
UNKNOWN_CALL_RETRIES = 8
UNKNOWN_CALL_DELAY = 0.05
#: A result the server could not take (5xx, connection errors, unrecognised 409s) is
#: posted again after this delay, doubling up to the cap. It stays saved meanwhile.
POST_RETRY_DELAY = 0.2
POST_RETRY_MAX_DELAY = 10.0
#: A Session that cannot be read is logged at most once in this many seconds.
READ_WARN_EVERY = 30.0
#: While the store is unreachable, try it again after this many seconds, doubling up to
#: the cap: a database restart takes seconds, and nothing is lost by waiting.
STORE_RETRY_DELAY = 0.1
STORE_RETRY_MAX_DELAY = 5.0
#: A claimed function starts only while at least this share of its lease is left,
#: counted from when the claim (or the last renewal) was *sent*: a claim the store
#: acknowledged late may have lapsed meanwhile, and another worker may have answered
#: the call "outcome unknown". Such a claim is renewed (which checks that it is still
#: ours) before the function starts.
START_LEASE_SHARE = 1 / 3
#: Progress marks are written when this many are queued, or this many seconds after the
#: oldest, or when a serve ends.
MARK_BATCH = 64
MARK_DELAY = 0.5
#: Remember this many non-function actions already reported, per Session.
_REPORTED_ACTIONS_LIMIT = 1024
_TERMINAL_STATUSES = frozenset({"idle", "failed"})
_TURN_ENDED = frozenset({"completed", "failed", "cancelled", "incomplete"})
_UNKNOWN_CALL = "unknown pending tool call"
_DIFFERENT_RESULT = "different result"
_CANNOT_ACCEPT = "cannot accept this input"

#: What a serve waits for: the Session idle, its Turn ended, ``stop()``, its stream
#: connected (``run_turn`` before it sends input), the stream to show the Item of the
#: input ``run_turn`` sent (and so its Turn), or one reconciliation (``recover``).
Mode = Literal["idle", "turn", "forever", "connected", "created", "once"]
#: What identifies a message by its content: each part's type and text or image.
ContentKey = tuple[tuple[str, str], ...]
#: The modes of ``run_turn``, whose serve keeps what the stream shows of each Turn.
_TURN_MODES = frozenset({"connected", "created", "turn"})


_IDLE_PHASES = frozenset({Phase.POSTED, Phase.DONE})
#: The phase a call is in while each kind of store effect for it is in flight.
_ANSWERED_IN: dict[type, Phase] = {
    ClaimCall: Phase.CLAIMING,
    TakeOver: Phase.TAKING_OVER,
    MarkInDoubt: Phase.MARKING_IN_DOUBT,
    Release: Phase.RELEASING,
    Lookup: Phase.LOOKING,
    SaveResult: Phase.SAVING,
}
#: Phases in which nothing was done for the call yet.
_WATCHED = frozenset({Phase.WAITING, Phase.QUEUED, Phase.READY, Phase.BACKOFF})
_NOT_STARTED = frozenset({Phase.CLAIMING, Phase.LOOKING})
#: Phases in which a call of a served function keeps a concurrency slot for itself.
_SLOT_PHASES = frozenset({Phase.CLAIMING, Phase.TAKING_OVER, Phase.QUEUED})
#: Phases of a call whose function has not ended: a Turn found over stops them.
_UNANSWERED = _NOT_STARTED | {Phase.WAITING, Phase.TAKING_OVER, Phase.QUEUED, Phase.RUNNING}
#: Saved results wait (up to ``BATCH_LINGER``) for calls of their Session in these.
_LINGER_FOR = _NOT_STARTED | {Phase.WAITING, Phase.QUEUED, Phase.RUNNING, Phase.SAVING}
#: Outcomes that do not settle a call: a later announcement decides it afresh.
_REDECIDE = frozenset({Outcome.RELEASED, Outcome.ABANDONED_BY_SERVE})
#: Outcomes that leave a call to another runner: announced again, it is not this one's.
_NOT_MINE = frozenset({Outcome.LEFT_PENDING, Outcome.IN_DOUBT_ELSEWHERE})


@dataclass(slots=True, eq=False)
class Call:
    """Everything this runner knows about one call. The only place ownership lives."""

    key: CallKey
    name: str
    arguments: object
    function: RegisteredFunction | None
    phase: Phase
    #: This runner's claim is confirmed and it must run, save or release the call;
    #: its lease is renewed meanwhile.
    lease_held: bool = False
    #: The ``attempts`` of the stored record as this runner last saw it.
    attempts: int = 0
    #: A result not saved yet (while ``SAVING``, or retried after a store failure).
    event: dict[str, Any] | None = None
    #: The saved record: exactly the bytes to post.
    record: CallRecord | None = None
    #: A store effect to send again once the store may be back.
    retry: Effect | None = None
    #: The claim or take-over to send once a concurrency slot is free (``WAITING``).
    claim: ClaimCall | TakeOver | None = None
    #: When the last claim or take-over for it was sent.
    claim_sent_at: float = float("-inf")
    #: Until when its lease is surely held: the lease counted from when the claim or
    #: renewal that the store confirmed was sent (``-inf``: not confirmed by this one).
    lease_until: float = float("-inf")
    not_before: float = 0.0
    #: POSTs that failed for a reason that may pass (backoff grows with them).
    post_failures: int = 0
    unknown_call_tries: int = 0
    #: When it became ready to post (results of one read linger to go together).
    ready_at: float = 0.0
    #: Posted alone: it was in a batch the server refused as a whole.
    alone: bool = False
    #: Its output Item came through the stream while the POST was in flight.
    output_seen: bool = False
    #: ``time.monotonic()`` instant its function must end by, if it has a timeout.
    deadline: float | None = None
    #: Its Turn was cancelled and the function was asked to stop.
    cancelled: bool = False
    #: False when the store refused its ids for good: its failure is posted unsaved
    #: (the same bytes every time) and no progress mark is written for it.
    recorded: bool = True
    #: The result being saved is what its function returned (or raised): if another
    #: worker's verdict was saved first, it is kept as the late outcome.
    run_result: bool = False
    #: Reads of its Session sent before this runner learned of the call: a later read
    #: that shows the Session idle proves its Turn ended (see ``_on_turns_ended``).
    known_at_read: int = 0
    #: Why the call is ``DONE`` (for reports and tests).
    outcome: Outcome | None = None


@dataclass(slots=True)
class Serve:
    """One ``serve``, ``run_turn`` or ``recover`` call attached to a Session."""

    id: int
    session_id: str
    until: Mode
    report: ServeReport
    stopping: bool = False
    connected: bool = False
    read_once: bool = False
    fatal: Exception | None = None
    target_turn: str | None = None
    target_turn_status: str | None = None
    #: For ``run_turn``: finished messages and Turn ends as streamed, by Turn, from the
    #: moment the stream connected (the pump may see the new Turn's events before
    #: ``run_turn`` learns which Turn its input started), and the reconnects counted
    #: before the input was sent (``streamed_answer``).
    messages_by_turn: dict[str, list[MessageItem]] = field(default_factory=dict)
    ends_by_turn: dict[str, str] = field(default_factory=dict)
    reconnects_at_turn_start: int = 0
    #: In mode ``created``: the content of the first message ``run_turn`` sent
    #: (:func:`content_key`), and the Turn of the first user Item streamed with that
    #: content since, which is the Turn the input started or joined. The first Turn
    #: created is not: another client's input may start (and end) one first.
    input_key: ContentKey = ()
    created_turn: str | None = None

    @property
    def turn_end_seen(self) -> bool:
        return self.target_turn is not None and self.target_turn in self.ends_by_turn

    def streamed_answer(self) -> list[MessageItem] | None:
        """The target Turn's messages as streamed, or ``None`` if the stream may have
        missed some (it dropped, or the Turn's end did not come through it)."""
        if self.turn_end_seen and self.report.reconnects == self.reconnects_at_turn_start:
            assert self.target_turn is not None
            return self.messages_by_turn.get(self.target_turn, [])
        return None


@dataclass(slots=True)
class _SessionView:
    session_id: str
    status: str | None = None
    pending: frozenset[CallKey] = frozenset()
    #: Pending calls this runner leaves to others: functions it does not serve, calls
    #: in doubt only a runner knowing the function can settle, refused results.
    not_mine: set[CallKey] = field(default_factory=set)
    #: This runner's calls of the Session (the same objects as ``RunnerCore.calls``).
    calls: dict[CallKey, Call] = field(default_factory=dict)
    #: The keys of those not yet posted or done (kept by ``RunnerCore._move``).
    unsettled: set[CallKey] = field(default_factory=set)
    last_read: float = float("-inf")
    read_at: float | None = None
    reading: bool = False
    reported_actions: OrderedDict[str, None] = field(default_factory=OrderedDict)
    #: When reads of the Session started failing to reach the server, if they do.
    unreachable_since: float | None = None
    #: When a failed read of the Session was last logged.
    read_warned_at: float = float("-inf")
    #: Session snapshots the stream brought, and how many it had when the read in
    #: flight was sent: a read must not undo a snapshot newer than itself.
    snapshots_streamed: int = 0
    snapshots_when_read: int = 0
    #: Snapshots reconciled so far, and for each result the server refused, how many
    #: there were then: a Turn waits on a refused result only as far as a later
    #: snapshot shows (the call may have been settled meanwhile).
    snapshots: int = 0
    refused: dict[CallKey, int] = field(default_factory=dict)
    #: Turns the stream or a Turn read showed cancelled: their calls never start, even
    #: when a Session read taken before the cancel still lists them, and their results
    #: are kept but not posted (the server would refuse them).
    cancelled_turns: set[str] = field(default_factory=set)
    #: Turns a Session read showed over (the Session idle while this runner held one of
    #: their calls): their calls never start; their results are still posted, for the
    #: server to say whether it holds another.
    ended_turns: set[str] = field(default_factory=set)
    #: Reads of the Session sent so far (the one in flight is the last).
    reads_sent: int = 0
    #: Batches of results posted and not yet answered: one at a time, so results that
    #: are saved meanwhile go together in the next (8 parallel calls: a few POSTs, not 8).
    posting: int = 0


class RunnerCore:
    """Decisions for every call and Session one runner handles.

    Not thread-safe: drivers call it from one thread at a time (the sync driver holds a
    lock; the async driver calls it only from its event loop).
    """

    def __init__(
        self,
        registry: FunctionRegistry,
        *,
        owner: str,
        lease_seconds: float,
        max_concurrency: int,
        unknown_functions: Literal["leave", "fail"],
        poll_interval: float,
        in_doubt_hook: bool,
        action_hook: bool,
        unreachable_timeout: float | None = None,
    ) -> None:
        self.registry = registry
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.max_concurrency = max_concurrency
        self.unknown_functions = unknown_functions
        self.poll_interval = poll_interval
        self.in_doubt_hook = in_doubt_hook
        self.action_hook = action_hook
        #: Serves that must end give up once their Session's reads could not reach the
        #: server for this long (``None``: never).
        self.unreachable_timeout = unreachable_timeout
        self.calls: dict[CallKey, Call] = {}
        self.serves: dict[int, Serve] = {}
        #: Serves out of time, in their grace: they follow nothing, but their reports
        #: still count what becomes of their Session's calls (until detached again).
        self._in_grace: dict[int, Serve] = {}
        self._serves_by_session: dict[str, dict[int, Serve]] = {}
        self._sessions: dict[str, _SessionView] = {}
        self._last_serve_id = 0
        self._effects: list[Effect] = []
        self._notes: list[Note] = []
        self._running = 0
        #: Calls failed for their timeout whose function has not returned yet: each
        #: still holds a concurrency slot (its thread or task is busy).
        self._overrunning: dict[CallKey, str] = {}
        #: Functions running now by name, counting those past their timeout.
        self._running_by_name: Counter[str] = Counter()
        #: Calls the clockwork looks at (queued, ready, backing off, with a deadline or
        #: a store retry), so a round costs what is due, not every call remembered.
        self._watch: dict[CallKey, Call] = {}
        #: Keys whose claim or take-over raised: it may have committed, leaving the
        #: record started, ours, with this many attempts. Only these may later be
        #: recognised as this runner's own unconfirmed claim.
        self._unconfirmed: dict[CallKey, int] = {}
        self._marks: dict[CallKey, CallState] = {}
        #: When the queued marks are due (the oldest's time plus ``MARK_DELAY``).
        self._marks_due = 0.0
        self._marks_writing = False
        self._marks_failed = False
        self._renew_at: float | None = None
        self._renewing = False
        self._renew_sent_at = float("-inf")
        #: Renewals asked for to confirm a claim before its function starts wait until
        #: then after a failed renewal (the store may be down).
        self._renew_retry_at = float("-inf")
        self._renew_failures = 0
        #: Calls keeping a concurrency slot without running (``_SLOT_PHASES``): with
        #: the running ones, never more than ``max_concurrency``.
        self._reserved: dict[CallKey, Call] = {}
        self._store_failures = 0
        self._store_retry_at = float("-inf")  # monotonic clocks may start anywhere

    # -- serves ---------------------------------------------------------------------------

    def attach(self, session_id: str, until: Mode, now: float) -> Serve:
        """Start tracking a serve; ``once`` (``recover``) reads the Session right away,
        the others when their stream connects."""
        self._last_serve_id += 1
        serve = Serve(self._last_serve_id, session_id, until, ServeReport(session_id))
        self.serves[serve.id] = serve
        self._serves_by_session.setdefault(session_id, {})[serve.id] = serve
        view = self._view(session_id)
        if until == "once":
            self._want_read(view, now)
        return serve

    def detach(self, serve: Serve, now: float, *, grace: bool = False) -> None:
        """The serve ended, however it ended. Running functions go on and their results
        are saved and posted in the background; claims nobody will run are released.

        With ``grace`` (the serve ran out of time and waits for what it started to
        settle), its report still counts what happens to the Session's calls until the
        serve is detached again.
        """
        if grace:
            self._in_grace[serve.id] = serve
        else:
            self._in_grace.pop(serve.id, None)
        if self._marks:
            self._marks_due = min(self._marks_due, now)  # nobody may wait to batch more
        was_attached = self.serves.pop(serve.id, None) is not None
        attached = self._serves_by_session.get(serve.session_id, {})
        attached.pop(serve.id, None)
        if not attached:
            self._serves_by_session.pop(serve.session_id, None)
        self._release_unrun(serve.session_id, now)
        view = self._view(serve.session_id)
        if was_attached and serve.connected and attached:
            # Its stream's last snapshot may be older than one another stream brought
            # (each stream keeps its own order, not the others'), and no later event of
            # that stream will correct it: the serves left read the Session again.
            self._want_read(view, now)
        if not self._serves_of(serve.session_id):
            for call in list(view.calls.values()):
                if call.phase is Phase.DONE:
                    self._forget(call)
            if not view.calls:
                del self._sessions[serve.session_id]

    @property
    def last_serve_id(self) -> int:
        return self._last_serve_id

    def stop(self, last_serve: int, *, force: bool = False) -> None:
        """Ask the serves attached up to ``last_serve`` (those running when ``stop()``
        was called, not later ones) to finish what they started; with ``force``, their
        running functions are asked to stop too (cancelled)."""
        for serve in self.serves.values():
            if serve.id > last_serve:
                continue
            serve.stopping = True
            if force:
                for call in self._calls_of(serve.session_id):
                    if call.phase is Phase.RUNNING and not call.cancelled:
                        call.cancelled = True
                        self._effects.append(CancelFunction(call.key))

    def expect_turn(self, serve: Serve, reconnects: int, input_key: ContentKey) -> bool:
        """``run_turn`` is about to send its input, whose first message has the content
        ``input_key``; ``reconnects`` is the count now.

        Whether the stream can name the Turn the input lands in, saving a request: the
        input's first message becomes a user Item of that Turn (the one it started, or
        the running one it joined), streamed as ``item.added``. The serve then waits
        (mode ``created``) for that Item, or for a reconnect, after which the caller
        looks the Item up in the Session's history instead.
        """
        serve.reconnects_at_turn_start = reconnects
        serve.created_turn = None
        serve.input_key = input_key
        if serve.connected:
            serve.until = "created"
        return serve.until == "created"

    def start_turn(self, serve: Serve, turn_id: str, status: str, reconnects: int) -> None:
        """``run_turn`` learned the Turn its input started, and waits for its end. Its
        events may already have come through the stream (they were kept by Turn);
        ``reconnects`` is the count before the input was sent."""
        serve.until = "turn"
        serve.target_turn = turn_id
        serve.target_turn_status = serve.ends_by_turn.get(turn_id, status)
        serve.reconnects_at_turn_start = reconnects

    def finished(self, serve: Serve, now: float) -> bool:
        """Whether ``serve`` may return now. Raises the serve's fatal error, if any."""
        if serve.fatal is not None:
            raise serve.fatal
        if serve.until == "connected":
            # And read once: ``run_turn`` must know whether the Session is idle.
            return serve.connected and serve.read_once
        if serve.until == "created":
            dropped = serve.report.reconnects != serve.reconnects_at_turn_start
            return serve.created_turn is not None or dropped
        settled = self._settled(serve)
        if settled and self._marks_outstanding(serve.session_id):
            if not self._marks_writing and not self._marks_failed:
                self._flush_marks(now)
            return False
        if settled:
            serve.report.final_status = self._view(serve.session_id).status
            refused = self._refused_in_turn(serve) if serve.until == "turn" else []
            if refused and serve.target_turn_status not in _TURN_ENDED:
                serve.target_turn_status = "waiting"
                for key in refused:  # refused before this serve attached, too
                    if key not in serve.report.rejected:
                        serve.report.rejected.append(key)
        return settled

    def _refused_in_turn(self, serve: Serve) -> list[CallKey]:
        """The refused results ``run_turn``'s Turn waits on: it cannot end until a person
        settles them, so it is returned as it is, not waited out."""
        view = self._view(serve.session_id)
        return [
            key
            for key, seen in view.refused.items()
            if key.turn_id == serve.target_turn and key in view.pending and view.snapshots > seen
        ]

    def settling(self, session_id: str | None = None) -> bool:
        """Whether calls (of one Session, or any) still need this runner, counting the
        progress marks of results already posted: a serve out of time or a runner
        closing waits for these too, so the store is final when it returns."""
        if session_id is None:
            return self.busy() or bool(self._marks) or self._marks_writing
        return self.busy(session_id) or self._marks_outstanding(session_id)

    def busy(self, session_id: str | None = None) -> bool:
        """Whether calls (of one Session, or any) still need this runner."""
        if session_id is not None:
            view = self._sessions.get(session_id)
            return view is not None and bool(view.unsettled)
        return any(view.unsettled for view in self._sessions.values())

    def _settled(self, serve: Serve) -> bool:
        view = self._view(serve.session_id)
        if serve.until == "once":
            # One pass: a call not even looked at because the store is down is left
            # for the next pass (and counted in ``store_errors``), not waited for.
            busy = any(
                call.phase not in _IDLE_PHASES
                and not (call.phase in _NOT_STARTED and call.retry is not None)
                for call in view.calls.values()
            )
            return serve.read_once and not busy and not view.reading
        if self.busy(serve.session_id) or view.read_at is not None or view.reading:
            return False
        if serve.stopping:
            return True
        if serve.until == "forever":
            return False
        if serve.until == "turn":
            return serve.target_turn_status in _TURN_ENDED or bool(self._refused_in_turn(serve))
        if view.status == "requires_action":
            # Waiting only on what this runner cannot do (other functions, approvals,
            # an Environment): serving longer would change nothing.
            return view.pending <= view.not_mine
        return view.status in _TERMINAL_STATUSES

    # -- observing the server ----------------------------------------------------------------

    def on_connected(self, serve: Serve, now: float) -> None:
        """The serve's stream (re)opened: what it missed is in a fresh Session read."""
        serve.connected = True
        self._want_read(self._view(serve.session_id), now)

    def on_dropped(self, serve: Serve) -> None:
        serve.report.reconnects += 1

    def on_stream_failed(self, serve: Serve, error: Exception) -> None:
        """The stream cannot be opened again: the serve ends with an error."""
        if isinstance(error, NotFoundError):
            self._session_gone(serve.session_id, error)
            return
        serve.fatal = RunnerError(f"Cannot serve Session {serve.session_id}: {error}")
        serve.fatal.__cause__ = error

    def on_event(self, serve: Serve, event: SessionEvent, now: float) -> None:
        """One live stream event of ``serve``'s Session (drivers pass only those it
        ``heeds``)."""
        if isinstance(event, SessionSnapshotEvent):
            self._view(serve.session_id).snapshots_streamed += 1
            self._on_session(serve.session_id, event.session, now)
            return
        if isinstance(event, (ItemAddedEvent, ItemDoneEvent)):
            item = event.item
            if isinstance(item, FunctionCallOutputItem):
                self._on_output(CallKey(serve.session_id, item.turn_id, item.call_id), now)
            elif isinstance(item, MessageItem) and item.role == "user":
                if (
                    serve.until == "created"
                    and serve.created_turn is None
                    and content_key(item.content) == serve.input_key
                ):
                    serve.created_turn = item.turn_id or event.turn_id
            elif (
                isinstance(item, MessageItem)
                and isinstance(event, ItemDoneEvent)
                and item.turn_id is not None
                and serve.until in _TURN_MODES
            ):
                serve.messages_by_turn.setdefault(item.turn_id, []).append(item)
            elif isinstance(item, FunctionCallItem) and _is_complete_call(event, item):
                turn_id = item.turn_id or event.turn_id
                if turn_id:
                    self._consider(PendingCall.from_item(serve.session_id, turn_id, item), now)
            return
        if isinstance(event, TerminalTurnEvent):
            turn = getattr(event, "turn", None)
            status = getattr(turn, "status", None) or _terminal_status(event)
            if status == "cancelled":
                self._cancel_turn(serve.session_id, event.turn_id, now)
            if serve.until in _TURN_MODES:
                serve.ends_by_turn[event.turn_id] = status
            if event.turn_id == serve.target_turn:
                serve.target_turn_status = status

    def _cancel_turn(self, session_id: str, turn_id: str, now: float) -> None:
        """The Turn was cancelled: its running functions are asked to stop, and its
        claims whose functions have not started are given back: they never run."""
        self._view(session_id).cancelled_turns.add(turn_id)
        self._stop_turn(session_id, turn_id, now)

    def _stop_turn(self, session_id: str, turn_id: str, now: float) -> None:
        """The Turn takes no more results: stop its functions, give back its claims."""
        for call in self._calls_of(session_id):
            if call.key.turn_id != turn_id:
                continue
            if call.phase is Phase.RUNNING and not call.cancelled:
                call.cancelled = True
                self._effects.append(CancelFunction(call.key))
            elif call.phase is Phase.QUEUED:
                self._give_back(call, now)
            elif call.phase is Phase.WAITING:
                self._done(call, Outcome.RELEASED)  # never claimed: nothing to give back

    def on_session_read(self, answer: SessionOutcome, now: float) -> None:
        view = self._view(answer.session_id)
        view.reading = False
        if answer.error is not None:
            if isinstance(answer.error, NotFoundError):
                self._session_gone(answer.session_id, answer.error)
                return
            # The server could not be read: try again after a poll interval, saying so
            # once in a while, not at every try.
            if now - view.read_warned_at >= READ_WARN_EVERY:
                view.read_warned_at = now
                self._say(
                    logging.WARNING,
                    "Could not read Session %s from %s: %s (trying again every %g s%s)",
                    answer.session_id,
                    _url_of(answer.error),
                    answer.error,
                    self.poll_interval,
                    ""
                    if self.unreachable_timeout is None
                    else f"; a serve that must end gives up after {self.unreachable_timeout:g} s",
                )
            view.read_at = now + self.poll_interval
            self._server_failing(view, answer.error, now)
            return
        view.unreachable_since = None
        assert answer.session is not None
        if answer.turn is not None and answer.turn.status == "cancelled":
            self._cancel_turn(answer.session_id, answer.turn.id, now)
        if answer.session.status in _TERMINAL_STATUSES:
            self._on_turns_ended(view, now)
        for serve in self._serves_of(answer.session_id):
            if (
                answer.turn is not None
                and answer.turn.id == serve.target_turn
                and serve.target_turn_status not in _TURN_ENDED
            ):
                # An ended Turn stays ended: a read sent before its end event came
                # through the stream must not make the serve wait for that end again.
                serve.target_turn_status = answer.turn.status
            serve.read_once = True
        if view.snapshots_streamed == view.snapshots_when_read:
            self._on_session(answer.session_id, answer.session, now)
        # Otherwise the stream brought a Session snapshot while the read was in flight:
        # the read may predate it (an idle Session read as in progress), and nothing
        # would come to correct it, so the streamed snapshot stands.

    def _on_turns_ended(self, view: _SessionView, now: float) -> None:
        """A read shows the Session idle (or failed): no Turn is open, so every Turn
        whose call this runner knew of before the read was sent has ended, however its
        end reached the server (a cancel while the stream was down, say). Those calls
        are no longer required: running ones are asked to stop, claims not started are
        given back. Only a read sent after the call was known proves it; an older read
        may show the Session idle from before the call's Turn began."""
        for call in self._calls_of(view.session_id):
            turn_id = call.key.turn_id
            if call.known_at_read >= view.reads_sent or _turn_over(view, turn_id):
                continue
            if call.phase in _UNANSWERED:
                self._say(
                    logging.INFO,
                    "Turn %s of Session %s ended while call %s was not answered; it is "
                    "no longer required and will not run (or is asked to stop)",
                    turn_id,
                    view.session_id,
                    call.key.call_id,
                )
                view.ended_turns.add(turn_id)
                self._stop_turn(view.session_id, turn_id, now)

    def _server_failing(self, view: _SessionView, error: Exception, now: float) -> None:
        """A read or a POST of the Session failed. Serves that must end (all but
        ``forever``) end with the error at once when retrying cannot help (the key or the
        URL is refused, or the client could not even build the request), and after
        ``unreachable_timeout`` seconds of failures otherwise."""
        if isinstance(error, APIConnectionError):
            self._unreachable(view, error, now)
            return
        hopeless = not isinstance(error, APIError) or (
            isinstance(error, APIStatusError)
            and not is_retryable_status(error.status_code)
            and not isinstance(error, ConflictError)
        )
        if view.unreachable_since is None:
            view.unreachable_since = now
        down = now - view.unreachable_since
        if hopeless:
            self._end_serves(view, error)
        elif self.unreachable_timeout is not None and down >= self.unreachable_timeout:
            fatal = RunnerError(
                f"The server at {_url_of(error)} kept failing for {down:.0f} s ({error}); "
                "check that base_url points at the Agents API and that the server is healthy"
            )
            fatal.__cause__ = error
            self._end_serves(view, fatal)

    def _end_serves(self, view: _SessionView, error: Exception) -> None:
        for serve in self._serves_of(view.session_id):
            if serve.until != "forever" and serve.fatal is None:
                serve.fatal = error

    def _unreachable(self, view: _SessionView, error: APIConnectionError, now: float) -> None:
        """Serves that must end (all but ``forever``) give up on a server that could not
        be reached for ``unreachable_timeout`` seconds, with an error naming its URL."""
        if view.unreachable_since is None:
            view.unreachable_since = now
        down = now - view.unreachable_since
        if self.unreachable_timeout is None or down < self.unreachable_timeout:
            return
        url = _url_of(error)
        fatal = APIConnectionError(
            request=error.request,
            message=f"Cannot reach {url} (tried for {down:.0f} s: {error}); check "
            "base_url or OPENAGENTCORE_BASE_URL and that the server is running",
        )
        fatal.__cause__ = error
        self._end_serves(view, fatal)

    def _on_session(self, session_id: str, session: Session, now: float) -> None:
        """Reconcile against a Session snapshot: its ``required_actions`` are the truth."""
        view = self._view(session_id)
        view.status = session.status
        view.last_read = now
        pending: list[PendingCall] = []
        for action in session.required_actions:
            if isinstance(action, FunctionCallAction):
                pending.append(PendingCall.from_action(session_id, action))
            else:
                self._report_action(view, action)
        view.pending = frozenset(call.key for call in pending)
        view.not_mine &= view.pending
        view.snapshots += 1
        view.refused = {key: n for key, n in view.refused.items() if key in view.pending}
        # Forget settled calls the server no longer waits on: memory stays bounded.
        for call in list(view.calls.values()):
            if call.phase in _IDLE_PHASES and call.key not in view.pending:
                self._forget(call)
        for waiting in pending:
            self._consider(waiting, now)

    def _on_output(self, key: CallKey, now: float) -> None:
        """An output Item proves our result applied only once the server accepted it.
        The Item may come through the stream before the POST's answer does."""
        call = self.calls.get(key)
        if call is None:
            return
        if call.phase is Phase.POSTED:
            self._queue_mark(key, CallState.APPLIED, now)
            self._done(call, Outcome.APPLIED)
        elif call.phase is Phase.POSTING:
            call.output_seen = True

    def _session_gone(self, session_id: str, error: Exception) -> None:
        message = (
            f"Session {session_id} no longer exists (deleted, or it belongs to another "
            "Project); stop serving it. Its saved results stay in the store."
        )
        if isinstance(error, NotFoundError) and error.route_missing:
            # Not the API saying the Session is gone: base_url names no API route.
            message = f"Cannot serve Session {session_id}: {error.message}"
        for serve in self._serves_of(session_id):
            serve.fatal = RunnerError(message)
            serve.fatal.__cause__ = error
        for call in self._calls_of(session_id):
            if call.phase in (Phase.READY, Phase.BACKOFF):
                self._done(call, Outcome.SESSION_GONE)

    def _report_action(self, view: _SessionView, action: RequiredAction) -> None:
        ident = getattr(action, "request_id", None) or getattr(action, "environment_id", None)
        ident = f"{action.type}:{ident}"
        if ident in view.reported_actions:
            return
        view.reported_actions[ident] = None
        if len(view.reported_actions) > _REPORTED_ACTIONS_LIMIT:
            view.reported_actions.popitem(last=False)
        if self.action_hook:
            self._effects.append(ReportAction(view.session_id, action))
        else:
            self._say(
                logging.INFO,
                "Session %s requires a %s action; this runner only serves function calls",
                view.session_id,
                action.type,
            )

    # -- deciding ------------------------------------------------------------------------------

    def _consider(self, pending: PendingCall, now: float) -> None:
        known = self.calls.get(pending.key)
        if known is not None and known.phase is Phase.DONE and known.outcome in _REDECIDE:
            self._forget(known)
            known = None
        if known is not None:
            if known.phase is Phase.DONE and known.outcome in _NOT_MINE:
                self._view(pending.key.session_id).not_mine.add(pending.key)
            self._count(pending.key.session_id, "duplicates_skipped")
            return
        if all(serve.stopping for serve in self._serves_of(pending.key.session_id)):
            return  # stopping: leave new calls pending for the next serve
        if _turn_over(self._view(pending.key.session_id), pending.key.turn_id):
            return  # a read from before the cancel: the Turn takes no result
        function = self.registry.get(pending.name)
        call = Call(pending.key, pending.name, pending.arguments, function, FIRST)
        self.calls[pending.key] = call
        view = self._view(pending.key.session_id)
        view.calls[pending.key] = call
        view.unsettled.add(pending.key)
        call.known_at_read = view.reads_sent
        if not _sendable(pending.key):
            self._say(
                logging.ERROR,
                "Call %r of Session %s has ids that cannot be sent back as UTF-8 (a lone "
                "surrogate); leaving it pending. The server should never send such ids.",
                pending.key.call_id,
                pending.key.session_id,
            )
            self._leave_unknown(call, None, False)
            return
        if function is None and self.unknown_functions == "leave":
            self._emit(call, Lookup(call.key), now)
            return
        if function is None:  # unknown_functions="fail": claimed to answer, never run
            self._move(call, Phase.CLAIMING)
            self._emit(call, self._claim_effect(call), now)
            return
        self._wait_for_slot(call, self._claim_effect(call), now)

    def _wait_for_slot(self, call: Call, claim: ClaimCall | TakeOver, now: float) -> None:
        """Claim (or take over) ``call`` once a concurrency slot is free, not before."""
        call.claim = claim
        self._enter(call, Phase.WAITING, now)

    def _claim_waiting(self, now: float) -> None:
        """Send the claims of waiting calls, oldest first, while slots are free."""
        for call in list(self._watch.values()):
            if self._running + len(self._reserved) >= self.max_concurrency:
                return
            if call.phase is not Phase.WAITING or not self._slot_free(call):
                continue
            claim, call.claim = call.claim, None
            assert claim is not None
            self._move(call, Phase.CLAIMING if isinstance(claim, ClaimCall) else Phase.TAKING_OVER)
            self._emit(call, claim, now)

    def _slot_free(self, call: Call) -> bool:
        """Whether ``call``'s function is under its own ``max_concurrency``."""
        assert call.function is not None
        limit = call.function.max_concurrency
        if limit is None:
            return True
        kept = sum(1 for other in self._reserved.values() if other.name == call.name)
        return self._running_by_name[call.name] + kept < limit

    def _claim_effect(self, call: Call) -> ClaimCall:
        return ClaimCall(
            call.key,
            function_name=call.name,
            arguments_hash=arguments_hash(call.arguments),
            owner=self.owner,
            lease_seconds=self.lease_seconds,
        )

    def on_store_answer(self, answer: StoreAnswer, now: float) -> None:
        effect = answer.effect
        if isinstance(effect, WriteMarks):
            self._on_marks_written(effect, answer.error, now)
            return
        if isinstance(effect, RenewLeases):
            self._on_renewed(answer, now)
            return
        if isinstance(effect, KeepLateOutcome):
            if answer.error is not None:
                # Best effort: the outcome is in the log already, and nothing sent or
                # to be sent depends on it, so it is not written again.
                self._say(
                    logging.WARNING,
                    "Could not keep the late outcome of call %s in the result store: %s",
                    effect.key.call_id,
                    answer.error,
                )
            return
        call = self.calls.get(effect.key)
        if call is None or call.phase is not _ANSWERED_IN[type(effect)]:
            if isinstance(answer.value, Claim) and answer.value.won:
                # A claim nobody here waits for any more: give it back at once.
                self._effects.append(Release(effect.key, self.owner))
            return
        if answer.error is not None:
            self._on_store_error(call, effect, answer.error, now)
            return
        self._store_ok()
        value = answer.value
        if isinstance(effect, ClaimCall):
            assert isinstance(value, Claim)
            self._on_claim(call, value, now)
        elif isinstance(effect, TakeOver):
            assert isinstance(value, Claim)
            if value.won or self._ours_unconfirmed(call, value.record):
                self._hold(call, value.record, now, won=value.won)
            else:
                self._decide_existing(call, value.record, value.stale, now)
        elif isinstance(effect, MarkInDoubt):
            self._on_marked_in_doubt(call, bool(value), now)
        elif isinstance(effect, Release):
            self._done(call, Outcome.RELEASED)
        elif isinstance(effect, Lookup):
            assert isinstance(value, LookupResult)
            self._on_lookup(call, value, now)
        elif isinstance(effect, SaveResult):
            assert isinstance(value, CallRecord)
            self._on_saved(call, value, now)

    def _on_claim(self, call: Call, claim: Claim, now: float) -> None:
        if claim.won or self._ours_unconfirmed(call, claim.record):
            self._hold(call, claim.record, now, won=claim.won)
            return
        self._decide_existing(call, claim.record, claim.stale, now)

    def _ours_unconfirmed(self, call: Call, record: CallRecord) -> bool:
        """Our own earlier claim or take-over raised but committed: the record is just
        as that write left it. The function never started (we remember every such
        write), so holding the call now runs it once, not again."""
        return (
            self._unconfirmed.get(call.key) == record.attempts
            and record.owner == self.owner
            and record.state is CallState.STARTED
            and not record.has_result()
        )

    def _hold(self, call: Call, record: CallRecord, now: float, *, won: bool) -> None:
        """The claim is ours. Its lease counts from when the claim was sent; a claim of
        ours found committed earlier (``won`` false) holds a lease of unknown age."""
        self._unconfirmed.pop(call.key, None)
        call.lease_held = True
        call.lease_until = call.claim_sent_at + self.lease_seconds if won else float("-inf")
        call.attempts = record.attempts
        if call.function is None:
            # unknown_functions="fail": the claim is ours; answer with a failure.
            error = f"No function named {call.name!r} is served here."
            self._save(call, failure_event(call.key, error), self.owner, now)
            return
        view = self._view(call.key.session_id)
        if not self._serves_of(call.key.session_id) or _turn_over(view, call.key.turn_id):
            # Its serve ended, or its Turn was cancelled or ended, while the claim was on
            # its way: nobody will run it.
            self._give_back(call, now)
            return
        self._enter(call, Phase.QUEUED, now)
        if self._renew_at is None:
            self._renew_at = now + self.lease_seconds / 3

    def _decide_existing(self, call: Call, record: CallRecord, stale: bool, now: float) -> None:
        """A record exists: settle the call from what it says, never by running again
        unless it is a call in doubt whose function is idempotent or that a person
        cleared to run again (``calls resolve --rerun``)."""
        self._unconfirmed.pop(call.key, None)
        call.attempts = record.attempts
        if record.state in (CallState.APPLIED, CallState.ABANDONED):
            self._count(call.key.session_id, "duplicates_skipped")
            self._done(call, Outcome.DUPLICATE)
        elif record.state is CallState.REJECTED:
            self._rejected(call, record, now, newly=False)
        elif record.has_result():
            call.record = record
            self._enter(call, Phase.READY, now)
            self._count(call.key.session_id, "results_resubmitted")
        elif call.function is None:
            self._leave_unknown(call, record, stale)
        elif cleared_to_rerun(record):
            self._say(
                logging.WARNING,
                "Call %s of %s in Session %s was cleared to run again by hand; running it",
                call.key.call_id,
                call.name,
                call.key.session_id,
            )
            self._wait_for_slot(
                call, TakeOver(call.key, self.owner, self.lease_seconds, record.attempts), now
            )
        elif record.state is CallState.IN_DOUBT:
            self._in_doubt(call, record.attempts, now)
        elif stale or record.owner == self.owner:
            # Nobody can be trusted to finish it (lease expired, owner gone, or this
            # process's own claim that nothing here runs): it may have run.
            self._move(call, Phase.MARKING_IN_DOUBT)
            self._emit(call, MarkInDoubt(call.key, self.owner, record.attempts), now)
        else:
            # Another worker holds a live claim: read the Session again later.
            self._count(call.key.session_id, "duplicates_skipped")
            self._forget(call)

    def _on_lookup(self, call: Call, found: LookupResult, now: float) -> None:
        record = found.record
        if record is None:
            if call.function is None:
                self._leave_unknown(call, None, False)
            else:  # re-checking a call whose record vanished: claim it afresh
                self._wait_for_slot(call, self._claim_effect(call), now)
            return
        self._decide_existing(call, record, found.stale, now)

    def _leave_unknown(self, call: Call, record: CallRecord | None, stale: bool) -> None:
        """A call to a function this runner does not serve (or whose ids no result could
        name): left for a runner that does.

        A result someone saved was resubmitted above (that is how ``openagentcore
        recover`` settles a Session without the application's code).
        """
        view = self._view(call.key.session_id)
        view.not_mine.add(call.key)
        report_to = "left_pending"
        if record is not None and (record.state is CallState.IN_DOUBT or stale):
            # A call cleared to run again by hand waits for a runner that serves it.
            report_to = "left_pending" if cleared_to_rerun(record) else "in_doubt"
        self._report_key(call.key.session_id, report_to, call.key)
        self._done(
            call,
            Outcome.LEFT_PENDING if report_to == "left_pending" else Outcome.IN_DOUBT_ELSEWHERE,
        )

    def _on_marked_in_doubt(self, call: Call, changed: bool, now: float) -> None:
        # Ours or not, a call marked in doubt is settled by the in-doubt policy at
        # once, as a restarted runner would: the Turn must not wait on it.
        call.lease_held = False
        if not changed:
            # Someone moved it first (took it over, saved a result): look again.
            self._move(call, Phase.LOOKING)
            self._emit(call, Lookup(call.key), now)
            return
        self._in_doubt(call, call.attempts, now)

    def _in_doubt(self, call: Call, attempts: int, now: float) -> None:
        """A call that started and left no result: decide without running it blindly."""
        self._report_key(call.key.session_id, "in_doubt", call.key)
        function = call.function
        assert function is not None
        if function.idempotent:
            self._decided(
                call, attempts, InDoubtAnswer(call.key, Verdict.RERUN), now
            )  # capped there
        elif self.in_doubt_hook:
            self._move(call, Phase.DECIDING)
            self._effects.append(AskInDoubt(call.key, call.name, call.arguments, attempts))
        else:
            self._decided(call, attempts, InDoubtAnswer(call.key, Verdict.FAIL), now)

    def on_in_doubt_answer(self, answer: InDoubtAnswer, now: float) -> None:
        """The ``on_in_doubt`` hook decided (a hook that raised decides ``fail``)."""
        call = self.calls.get(answer.key)
        if call is None or call.phase is not Phase.DECIDING:
            return
        self._decided(call, call.attempts, answer, now)

    def _decided(self, call: Call, attempts: int, answer: InDoubtAnswer, now: float) -> None:
        function = call.function
        if (
            answer.kind is Verdict.RERUN
            and function is not None
            and attempts >= function.max_attempts
        ):
            # ``max_attempts`` caps every run, whoever asks for another: a function that
            # kills its worker each time must not loop, whatever the hook answers.
            self._say(
                logging.WARNING,
                "Call %s of %s in Session %s was run %d times (max_attempts=%d); not "
                "running it again as asked, failing it as outcome unknown",
                call.key.call_id,
                call.name,
                call.key.session_id,
                attempts,
                function.max_attempts,
            )
            answer = InDoubtAnswer(call.key, Verdict.FAIL)
        self._say(
            logging.WARNING,
            "Call %s of %s in Session %s is in doubt (started, no saved result); resolving with %s",
            call.key.call_id,
            call.name,
            call.key.session_id,
            answer.kind.value,
        )
        if answer.kind is Verdict.RERUN:
            self._wait_for_slot(
                call, TakeOver(call.key, self.owner, self.lease_seconds, attempts), now
            )
            return
        event: dict[str, Any]
        if answer.kind is Verdict.RESULT:
            try:
                event = success_event(call.key, answer.value)
            except (TypeError, ValueError):
                self._say(
                    logging.ERROR, "on_in_doubt's result for %s cannot be sent", call.key.call_id
                )
                event = failure_event(call.key, IN_DOUBT_ERROR)
        else:
            try:
                event = checked_failure_event(call.key, answer.error or IN_DOUBT_ERROR)
            except ValueError:
                self._say(
                    logging.ERROR,
                    "on_in_doubt's error text for %s cannot be sent",
                    call.key.call_id,
                )
                event = failure_event(call.key, IN_DOUBT_ERROR)
        self._save(call, event, None, now)

    # -- running -----------------------------------------------------------------------------

    def _start_queued(self, now: float) -> None:
        """Start the claimed calls (each keeps a slot) whose lease is surely still
        theirs; the others are confirmed by a renewal first."""
        for call in list(self._watch.values()):
            if call.phase is not Phase.QUEUED or call.function is None:
                continue
            if call.lease_until - now < self.lease_seconds * START_LEASE_SHARE:
                due = max(now, self._renew_retry_at)
                if self._renew_at is None or self._renew_at > due:
                    self._renew_at = due
                continue
            self._move(call, Phase.RUNNING)
            self._running += 1
            self._running_by_name[call.name] += 1
            timeout = call.function.timeout
            call.deadline = None if timeout is None else now + timeout
            self._effects.append(
                RunFunction(call.key, call.function, call.arguments, call.attempts, call.deadline)
            )
            self._notes.append(CallStarted(call.key, call.name, call.attempts))

    def _time_out(self, now: float) -> None:
        """Fail calls whose function runs past its ``timeout``. The function is asked to
        stop; whatever it returns later changes nothing sent (it is logged, and kept in
        the store beside the record for the operator)."""
        for call in list(self._watch.values()):
            if call.phase is not Phase.RUNNING or call.deadline is None or call.deadline > now:
                continue
            function = call.function
            assert function is not None
            assert function.timeout is not None
            self._say(
                logging.WARNING,
                "Call %s of %s timed out after %g s",
                call.key.call_id,
                call.name,
                function.timeout,
            )
            self._effects.append(CancelFunction(call.key))
            self._overrunning[call.key] = call.name
            self._count(call.key.session_id, "calls_run")
            self._count(call.key.session_id, "function_errors")
            error = timeout_error(function.timeout, idempotent=function.idempotent)
            self._save(call, failure_event(call.key, error), self.owner, now)

    def on_function_done(self, outcome: FunctionOutcome, now: float) -> None:
        call = self.calls.get(outcome.key)
        if (
            call is not None
            and call.phase is Phase.RUNNING
            and call.deadline is not None
            and call.deadline <= now
        ):
            # Its time ran out before its outcome came in (the timekeeper had not
            # looked yet): the timeout decides, and this outcome is kept as late.
            self._time_out(now)
        if outcome.key in self._overrunning:
            self._running_by_name[self._overrunning.pop(outcome.key)] -= 1
            self._running -= 1
            late = outcome.event
            if late is None:
                late = failure_event(outcome.key, ENDED_WITHOUT_RESULT)
            self._say(
                logging.WARNING,
                "Call %s finished after its timeout; its late outcome was not sent, and is "
                "kept in the result store: %s",
                outcome.key.call_id,
                late,
            )
            self._effects.append(KeepLateOutcome(outcome.key, late))
            return
        call = self.calls.get(outcome.key)
        if call is None or call.phase is not Phase.RUNNING:
            return
        self._running -= 1
        self._running_by_name[call.name] -= 1
        session = call.key.session_id
        if outcome.event is None:
            # It ended without a result (SystemExit or the like): it may have had its
            # effect. Keep the lease until the store says "in doubt".
            self._move(call, Phase.MARKING_IN_DOUBT)
            self._emit(call, MarkInDoubt(call.key, self.owner, call.attempts), now)
            return
        if outcome.ran:
            self._count(session, "calls_run")
        if outcome.event.get("success") is False:
            self._count(session, "function_errors")
        self._save(call, outcome.event, self.owner, now)
        call.run_result = outcome.ran

    def _release_unrun(self, session_id: str, now: float) -> None:
        """Claims of a Session no serve follows any more, whose functions never started."""
        if self._serves_of(session_id):
            return
        for call in self._calls_of(session_id):
            if call.phase is Phase.QUEUED:
                self._give_back(call, now)
            elif call.phase is Phase.WAITING or (
                call.phase in _NOT_STARTED and call.retry is not None
            ):
                self._done(call, Outcome.ABANDONED_BY_SERVE)

    def _give_back(self, call: Call, now: float) -> None:
        """Release a claim whose function never started."""
        self._move(call, Phase.RELEASING)
        call.lease_held = False
        self._emit(call, Release(call.key, self.owner), now)

    # -- saving ------------------------------------------------------------------------------

    def _save(self, call: Call, event: dict[str, Any], owner: str | None, now: float) -> None:
        self._move(call, Phase.SAVING)
        call.event = event
        call.run_result = False
        self._emit(call, SaveResult(call.key, event, owner), now)

    def _on_saved(self, call: Call, record: CallRecord, now: float) -> None:
        call.lease_held = False
        attempted, call.event = call.event, None
        if call.run_result and attempted is not None and not _same_result(record, attempted):
            self._lost_race(call, attempted, record)
        if not record.has_result():
            if cleared_to_rerun(record):
                # A person cleared it to run again before the policy's answer landed.
                self._decide_existing(call, record, False, now)
                return
            # The call was settled meanwhile (abandoned); nothing to post.
            self._done(call, Outcome.DUPLICATE)
            return
        if record.state is CallState.REJECTED:
            self._rejected(call, record, now, newly=False)
            return
        call.record = record
        self._enter(call, Phase.READY, now)

    def _lost_race(self, call: Call, outcome: dict[str, Any], record: CallRecord) -> None:
        """The function finished, but another worker's verdict on its call (marked in
        doubt and answered, or settled) was saved first: the first saved result is what
        the model gets. The function's own is kept beside it, as after a timeout."""
        self._say(
            logging.WARNING,
            "Call %s of %s in Session %s finished, but another worker had settled it "
            "first (%s); its result was not sent, and is kept in the result store as its "
            "late outcome: %s",
            call.key.call_id,
            call.name,
            call.key.session_id,
            record.settled_by or record.state.value,
            outcome,
        )
        self._effects.append(KeepLateOutcome(call.key, outcome))

    # -- submitting --------------------------------------------------------------------------

    def _take_batches(self, now: float) -> None:
        by_session: dict[str, list[Call]] = {}
        for call in list(self._watch.values()):
            if call.phase is Phase.READY or (
                call.phase is Phase.BACKOFF and call.not_before <= now
            ):
                if self._cancelled_unsent(call, now):
                    continue
                by_session.setdefault(call.key.session_id, []).append(call)
        for session_id, calls in by_session.items():
            if self._view(session_id).posting or self._lingering(session_id, calls, now):
                continue
            chunks = [[call] for call in calls if call.alone]
            together = [call for call in calls if not call.alone]
            chunks += [together[i : i + MAX_BATCH] for i in range(0, len(together), MAX_BATCH)]
            for chunk in chunks:
                for call in chunk:
                    self._move(call, Phase.POSTING)
                records = tuple(call.record for call in chunk if call.record is not None)
                self._effects.append(PostResults(Batch(session_id, records)))
                self._view(session_id).posting += 1

    def _cancelled_unsent(self, call: Call, now: float) -> bool:
        """A saved result of a Turn known cancelled, never sent (or only refused as too
        early): the Turn takes no result any more, so it is not posted, only to be
        refused with a 409. It stays saved; the record is marked ``abandoned``, as a
        refused one would be: nothing is left to do for it. A result whose earlier POST
        may have reached the server is posted again instead, for the server to say."""
        view = self._view(call.key.session_id)
        if call.key.turn_id not in view.cancelled_turns or call.post_failures:
            return False
        self._say(
            logging.INFO,
            "Call %s: its Turn %s was cancelled, so its saved result is kept but not submitted",
            call.key.call_id,
            call.key.turn_id,
        )
        self._report_key(call.key.session_id, "abandoned", call.key)
        self._queue_mark(call.key, CallState.ABANDONED, now)
        self._done(call, Outcome.ABANDONED)
        return True

    def _lingering(self, session_id: str, ready: list[Call], now: float) -> bool:
        """Whether to hold a Session's saved results a moment: other calls of the Session
        are still being decided or run, and posting them together is one request instead
        of many (a restart resubmits a whole Session's results in one POST; parallel calls
        that end together go in one). The Turn needs every result before it goes on, so
        the first ones lose nothing by waiting for the last."""
        oldest = min(call.ready_at for call in ready)
        if now >= oldest + BATCH_LINGER:
            return False
        return any(call.phase in _LINGER_FOR for call in self._view(session_id).calls.values())

    def on_posted(self, outcome: PostOutcome, now: float) -> None:
        view = self._sessions.get(outcome.batch.session_id)
        if view is not None and view.posting:
            view.posting -= 1
        calls = [self.calls.get(record.key) for record in outcome.batch.records]
        mine = [call for call in calls if call is not None and call.phase is Phase.POSTING]
        error = outcome.error
        if error is None:
            if view is not None:
                view.unreachable_since = None
            for call in mine:
                self._notes.append(CallSettled(call.key, call.name, Outcome.SUBMITTED))
                self._move(call, Phase.POSTED)
                self._count(call.key.session_id, "results_submitted")
                if call.output_seen:
                    self._queue_mark(call.key, CallState.APPLIED, now)
                    self._done(call, Outcome.APPLIED)
                else:
                    self._queue_mark(call.key, CallState.SUBMITTED, now)
            return
        if isinstance(error, NotFoundError):
            self._session_gone(outcome.batch.session_id, error)
            return
        kind = classify_refusal(error)
        if kind in (Refusal.RETRY_LATER, Refusal.NO_ACCESS) and view is not None:
            self._server_failing(view, error, now)
        if kind is Refusal.NO_ACCESS:
            kind = Refusal.RETRY_LATER  # the result stays saved, for when the key or URL is fixed
        if len(mine) > 1 and kind is not Refusal.RETRY_LATER:
            # One bad result refuses the whole atomic batch: find it by sending each alone.
            for call in mine:
                self._enter(call, Phase.READY, now)
                call.alone = True
            return
        for call in mine:
            self._on_refused(call, kind, error, now)

    def _on_refused(self, call: Call, kind: Refusal, error: Exception, now: float) -> None:
        if kind is Refusal.RETRY_SOON and call.unknown_call_tries < UNKNOWN_CALL_RETRIES:
            self._enter(call, Phase.BACKOFF, now)
            call.not_before = now + UNKNOWN_CALL_DELAY * 2**call.unknown_call_tries
            call.unknown_call_tries += 1
            return
        if kind is Refusal.RETRY_LATER:
            # The server did not answer usefully even after the client's retries. The
            # result stays saved; it is posted again, later and later.
            delay = min(POST_RETRY_MAX_DELAY, POST_RETRY_DELAY * 2 ** min(call.post_failures, 16))
            call.post_failures += 1
            self._enter(call, Phase.BACKOFF, now)
            call.not_before = now + delay
            self._say(
                logging.WARNING,
                "Could not submit the result of call %s (%s); retrying in %.1f s",
                call.key.call_id,
                error,
                delay,
            )
            return
        if kind is Refusal.CONFLICT:
            # The server holds another result for this call. Never overwrite it.
            self._report_key(call.key.session_id, "conflicts", call.key)
            self._say(
                logging.ERROR,
                "Call %s already has a different result on the server; the saved one was "
                "not applied. Inspect it with `openagentcore calls show`.",
                call.key.call_id,
            )
            self._queue_mark(call.key, CallState.ABANDONED, now)
            self._done(call, Outcome.CONFLICT)
        elif kind is Refusal.ABANDONED:
            self._report_key(call.key.session_id, "abandoned", call.key)
            self._queue_mark(call.key, CallState.ABANDONED, now)
            self._done(call, Outcome.ABANDONED)
        else:
            self._say(
                logging.ERROR,
                "The server refused the result for call %s: %s. The call stays pending; "
                "inspect it with `openagentcore calls show %s` and answer it with "
                "`openagentcore calls resolve %s --failed MESSAGE` (or --output TEXT).",
                call.key.call_id,
                error,
                call.key.call_id,
                call.key.call_id,
            )
            assert call.record is not None
            self._rejected(call, call.record, now, newly=True)

    def _rejected(self, call: Call, record: CallRecord, now: float, *, newly: bool) -> None:
        """A result the server refused: never re-run, never pruned, reported each time."""
        self._report_key(call.key.session_id, "rejected", call.key)
        view = self._view(call.key.session_id)
        view.not_mine.add(call.key)
        view.refused.setdefault(call.key, view.snapshots)
        self._want_read(view, now)  # does the Turn still wait on it?
        if newly:
            self._queue_mark(call.key, CallState.REJECTED, now)
        self._done(call, Outcome.REJECTED)

    # -- progress marks, leases, store health -------------------------------------------------

    def _queue_mark(self, key: CallKey, to: CallState, now: float) -> None:
        call = self.calls.get(key)
        if call is not None and not call.recorded:
            return
        if not self._marks:
            self._marks_due = now + MARK_DELAY
        if not self._serves_of(key.session_id):
            # Nobody serves the Session any more (its serve ran out of time, or ended
            # while this call finished): no more results to batch with, write at once.
            self._marks_due = min(self._marks_due, now)
        self._marks[key] = to  # a later mark (applied) supersedes an earlier one
        self._marks_failed = False

    def _marks_outstanding(self, session_id: str) -> bool:
        return self._marks_writing or any(k.session_id == session_id for k in self._marks)

    def _flush_marks(self, now: float) -> None:
        if not self._marks or self._marks_writing:
            return
        changes = tuple(self._marks.items())
        self._marks.clear()
        self._marks_writing = True
        self._effects.append(WriteMarks(changes))

    def _on_marks_written(self, effect: WriteMarks, error: Exception | None, now: float) -> None:
        self._marks_writing = False
        if error is None:
            self._store_ok()
            return
        if not isinstance(error, StoreUnavailableError):
            # The store refuses these for good; they are bookkeeping, so drop them.
            self._say(
                logging.ERROR,
                "The result store refused %d progress marks: %s",
                len(effect.changes),
                error,
            )
            return
        # Bookkeeping only: put them back (newer marks win) and try again later.
        for key, state in effect.changes:
            self._marks.setdefault(key, state)
        self._marks_due = now + MARK_DELAY
        self._marks_failed = True
        self._store_failed(f"writing progress marks ({error})", now)

    def _on_renewed(self, answer: StoreAnswer, now: float) -> None:
        self._renewing = False
        self._renew_at = now + self.lease_seconds / 3
        if answer.error is not None:
            delay = STORE_RETRY_DELAY * 2 ** min(self._renew_failures, 16)
            self._renew_failures += 1
            self._renew_retry_at = now + min(STORE_RETRY_MAX_DELAY, delay)
            self._say(
                logging.WARNING, "Could not renew leases, retrying next round: %s", answer.error
            )
            return
        self._renew_failures = 0
        self._renew_retry_at = float("-inf")
        assert isinstance(answer.effect, RenewLeases)
        lost = answer.value if isinstance(answer.value, tuple) else ()
        for key in answer.effect.keys:
            call = self.calls.get(key)
            if call is None or not call.lease_held:
                continue
            if key not in lost:
                call.lease_until = max(call.lease_until, self._renew_sent_at + self.lease_seconds)
            elif call.phase is Phase.QUEUED:
                # Another worker may have taken it, or answered it "outcome unknown":
                # its function must not start here. A later read decides it afresh.
                self._say(
                    logging.WARNING,
                    "Lost the claim on call %s before its function started; not starting it",
                    key.call_id,
                )
                call.lease_held = False
                self._forget(call)
            else:
                self._say(
                    logging.WARNING,
                    "Lost the lease on call %s; another worker may take it",
                    key.call_id,
                )

    def _on_store_error(self, call: Call, effect: Effect, error: Exception, now: float) -> None:
        if not isinstance(error, StoreUnavailableError):
            self._on_store_refused(call, effect, error, now)
            return
        self._store_failed(f"{type(effect).__name__} of call {call.key.call_id} ({error})", now)
        if isinstance(effect, TakeOver):
            # It may have committed: the retry would then find the record ours.
            self._unconfirmed[call.key] = effect.expected_attempts + 1
        if isinstance(effect, ClaimCall):
            # The claim may have committed. Remember it, forget the call, and let a
            # later read of the Session decide it again once the store is back.
            self._unconfirmed[call.key] = 1
            self._forget(call)
            view = self._view(call.key.session_id)
            view.read_at = max(view.read_at or 0.0, self._store_retry_at)
            return
        call.retry = effect
        call.not_before = self._store_retry_at
        self._watch[call.key] = call

    def _on_store_refused(self, call: Call, effect: Effect, error: Exception, now: float) -> None:
        """A permanent store error (data the store cannot hold): the model gets a failed
        result, posted without a record, since it can never be saved."""
        self._say(
            logging.ERROR,
            "The result store refused %s of call %s: %s",
            type(effect).__name__,
            call.key.call_id,
            error,
        )
        if isinstance(effect, SaveResult) and effect.event.get("success") is not False:
            failure = failure_event(call.key, "The function's result could not be recorded.")
            self._save(call, failure, effect.owner, now)
            return
        if call.function is None and self.unknown_functions == "leave":
            self._leave_unknown(call, None, False)  # not ours to answer, even with a failure
            return
        call.lease_held = False
        call.recorded = False
        call.record = CallRecord(
            key=call.key,
            function_name=call.name,
            arguments_hash="",
            state=CallState.COMPLETED,
            result=failure_event(call.key, "This call cannot be recorded by the runner."),
            idempotency_key=idempotency_key_for(call.key),
            attempts=max(call.attempts, 1),
            owner=self.owner,
            lease_expires_at=None,
            created_at=0.0,
            updated_at=0.0,
        )
        self._enter(call, Phase.READY, now)

    def _store_failed(self, doing: str, now: float) -> None:
        delay = min(STORE_RETRY_MAX_DELAY, STORE_RETRY_DELAY * 2 ** min(self._store_failures, 16))
        self._store_failures += 1
        self._store_retry_at = now + delay
        for serve in self.serves.values():
            serve.report.store_errors += 1
        self._say(
            logging.WARNING, "Result store unavailable while %s; retrying in %.1f s", doing, delay
        )

    def _store_ok(self) -> None:
        self._store_failures = 0

    # -- the loop's clockwork ------------------------------------------------------------------

    def take_effects(self, now: float) -> list[Effect]:
        """Everything due now; the driver carries each out and feeds back its answer."""
        for call in list(self._watch.values()):
            if call.retry is not None and call.not_before <= now:
                effect, call.retry = call.retry, None
                if isinstance(effect, (ClaimCall, TakeOver)):
                    call.claim_sent_at = now
                self._effects.append(effect)
        self._time_out(now)
        self._claim_waiting(now)
        self._start_queued(now)
        self._take_batches(now)
        for session_id, serves in self._serves_by_session.items():
            view = self._view(session_id)
            read_at = self._next_read(view, serves.values())
            if read_at is not None and read_at <= now:
                view.reading = True
                view.read_at = None
                view.snapshots_when_read = view.snapshots_streamed
                view.reads_sent += 1
                turn = next((s.target_turn for s in serves.values() if s.target_turn), None)
                self._effects.append(ReadSession(session_id, turn))
        if (
            self._marks
            and not self._marks_writing
            and (len(self._marks) >= MARK_BATCH or now >= self._marks_due)
            and now >= self._store_retry_at
        ):
            self._flush_marks(now)
        if self._renew_at is not None and not self._renewing and now >= self._renew_at:
            held = tuple(c.key for c in self.calls.values() if c.lease_held)
            if held:
                self._renewing = True
                self._renew_sent_at = now
                self._effects.append(RenewLeases(held, self.owner, self.lease_seconds))
            else:
                self._renew_at = None
        self._unwatch()
        effects, self._effects = self._effects, []
        return effects

    def _enter(self, call: Call, phase: Phase, now: float) -> None:
        """Move ``call`` to a phase the clockwork acts on (queued, ready, backoff)."""
        self._move(call, phase)
        self._watch[call.key] = call
        if phase is Phase.READY:
            call.ready_at = now

    def _unwatch(self) -> None:
        """Drop calls the clockwork has nothing more to do for."""
        for key, call in list(self._watch.items()):
            if call.retry is None and not (
                call.phase in _WATCHED or (call.phase is Phase.RUNNING and call.deadline)
            ):
                del self._watch[key]

    def take_notes(self) -> list[Note]:
        """What happened to calls since the last call (for logs, traces, metrics)."""
        notes, self._notes = self._notes, []
        return notes

    def next_wakeup(self, now: float) -> float:
        """Seconds until something is due without any new input (at most the poll
        interval, which bounds every wait)."""
        due = [now + self.poll_interval]
        for call in self._watch.values():
            if call.retry is not None:
                due.append(call.not_before)
            elif call.phase in (Phase.READY, Phase.BACKOFF):
                if not self._view(call.key.session_id).posting:  # else: the POST's answer
                    ready = call.ready_at + BATCH_LINGER
                    due.append(call.not_before if call.phase is Phase.BACKOFF else ready)
            elif call.phase is Phase.RUNNING and call.deadline is not None:
                due.append(call.deadline)
        for session_id, serves in self._serves_by_session.items():
            read_at = self._next_read(self._view(session_id), serves.values())
            if read_at is not None:
                due.append(read_at)
        if self._marks and not self._marks_writing:
            due.append(max(self._marks_due, self._store_retry_at))
        if self._renew_at is not None and not self._renewing:
            due.append(self._renew_at)
        return max(0.0, min(due) - now)

    def _next_read(self, view: _SessionView, serves: Iterable[Serve]) -> float | None:
        """When the Session should be read next, if at all (only Sessions with serves
        are ever read)."""
        if view.reading or all(serve.until == "once" and serve.read_once for serve in serves):
            return None  # one pass (recover) is done
        if view.read_at is not None:
            return view.read_at
        # While the Session waits on calls other workers hold, no event may come for a
        # long time; reading it now and then notices a worker that died.
        if view.status == "requires_action" and not self.busy(view.session_id):
            return view.last_read + self.poll_interval
        return None

    def _want_read(self, view: _SessionView, now: float) -> None:
        view.read_at = now if view.read_at is None else min(view.read_at, now)

    # -- small helpers -------------------------------------------------------------------------

    def _emit(self, call: Call, effect: Effect, now: float) -> None:
        if now < self._store_retry_at:
            call.retry = effect
            call.not_before = self._store_retry_at
            self._watch[call.key] = call
        else:
            if isinstance(effect, (ClaimCall, TakeOver)):
                call.claim_sent_at = now
            self._effects.append(effect)

    def _say(self, level: int, message: str, *args: object) -> None:
        """Leave a log line for the observer, which logs it after the round: the core
        does no I/O, logging included."""
        self._notes.append(LogNote(level, message, args))

    def _done(self, call: Call, outcome: Outcome) -> None:
        if call.phase is not Phase.POSTED:  # a posted call was noted as submitted
            self._notes.append(CallSettled(call.key, call.name, outcome))
        self._move(call, Phase.DONE)
        call.outcome = outcome
        call.lease_held = False
        call.retry = None

    def _move(self, call: Call, phase: Phase) -> None:
        """Every phase change goes through here, along the table of legal moves (so a
        move nobody reasoned about fails loudly), and so ``busy`` and the kept
        concurrency slots need no scan."""
        check_move(call.phase, phase, call.key.call_id)
        call.phase = phase
        if phase in _SLOT_PHASES and call.function is not None and self.calls.get(call.key) is call:
            self._reserved[call.key] = call
        elif self._reserved.get(call.key) is call:
            del self._reserved[call.key]
        view = self._sessions.get(call.key.session_id)
        if view is None or view.calls.get(call.key) is not call:
            return  # forgotten: a late answer moves it, but nobody waits on it
        if phase in _IDLE_PHASES:
            view.unsettled.discard(call.key)
        else:
            view.unsettled.add(call.key)

    def _forget(self, call: Call) -> None:
        if self._reserved.get(call.key) is call:
            del self._reserved[call.key]
        self.calls.pop(call.key, None)
        self._watch.pop(call.key, None)
        view = self._view(call.key.session_id)
        view.calls.pop(call.key, None)
        view.unsettled.discard(call.key)

    def _view(self, session_id: str) -> _SessionView:
        view = self._sessions.get(session_id)
        if view is None:
            view = self._sessions[session_id] = _SessionView(session_id)
        return view

    def _serves_of(self, session_id: str) -> list[Serve]:
        return list(self._serves_by_session.get(session_id, {}).values())

    def _calls_of(self, session_id: str) -> list[Call]:
        return list(self._view(session_id).calls.values())

    def _reporting(self, session_id: str) -> list[Serve]:
        """The serves whose reports count what happens to the Session's calls."""
        in_grace = [serve for serve in self._in_grace.values() if serve.session_id == session_id]
        return self._serves_of(session_id) + in_grace

    def _count(self, session_id: str, name: str, amount: int = 1) -> None:
        for serve in self._reporting(session_id):
            setattr(serve.report, name, getattr(serve.report, name) + amount)

    def _report_key(self, session_id: str, name: str, key: CallKey) -> None:
        for serve in self._reporting(session_id):
            keys: list[CallKey] = getattr(serve.report, name)
            if key not in keys:
                keys.append(key)


class Refusal(str, enum.Enum):
    """What a failed POST of results means for each result in it."""

    #: The call is not pending yet (the server announced it a moment early).
    RETRY_SOON = "retry_soon"
    #: Nothing useful was said (5xx, connection errors, unrecognised 409s): later.
    RETRY_LATER = "retry_later"
    #: The key or the URL is refused, not this result: later, once they are fixed.
    NO_ACCESS = "no_access"
    #: The server holds another result for the call.
    CONFLICT = "conflict"
    #: The Turn cannot take the result any more.
    ABANDONED = "abandoned"
    #: The server refused this result.
    REJECTED = "rejected"


def classify_refusal(error: Exception) -> Refusal:
    """What a failed POST of results means (see :class:`Refusal`).

    409s are told apart by ``code`` first; the message is only a fallback for servers
    that answer ``conflict_error`` for everything, as the contract's own table does.
    """
    if isinstance(error, BadRequestError) and _UNKNOWN_CALL in _message(error):
        return Refusal.RETRY_SOON
    if isinstance(error, APIConnectionError):
        return Refusal.RETRY_LATER
    if isinstance(error, ConflictError):
        code = getattr(error, "code", None)
        message = _message(error)
        if code == "idempotency_conflict" or error.is_idempotency_conflict:
            return Refusal.CONFLICT
        if code == "turn_conflict":
            return Refusal.ABANDONED
        if _DIFFERENT_RESULT in message:
            return Refusal.CONFLICT
        if _CANNOT_ACCEPT in message:
            return Refusal.ABANDONED
        return Refusal.RETRY_LATER  # e.g. earlier input still pending: it passes
    if isinstance(error, RedirectError) or (
        isinstance(error, APIStatusError) and error.status_code in (401, 403)
    ):
        return Refusal.NO_ACCESS  # about the key or the URL, not this result
    if isinstance(error, APIStatusError):
        return Refusal.RETRY_LATER if is_retryable_status(error.status_code) else Refusal.REJECTED
    return Refusal.RETRY_LATER


def _message(error: Exception) -> str:
    return str(getattr(error, "message", error)).lower()


def _terminal_status(event: TerminalTurnEvent) -> str:
    """``completed`` from ``agent.session.turn.completed``, when the event has no Turn."""
    kind: str = getattr(event, "type", "")
    return kind.rsplit(".", 1)[-1]


def _same_result(record: CallRecord, event: dict[str, Any]) -> bool:
    """Whether ``record`` holds ``event`` (as saved: the store keeps its JSON)."""
    if record.result == event:
        return True
    return record.result is not None and json.dumps(record.result, sort_keys=True) == json.dumps(
        event, sort_keys=True
    )


def _turn_over(view: _SessionView, turn_id: str) -> bool:
    """Whether this runner knows the Turn takes no more results."""
    return turn_id in view.cancelled_turns or turn_id in view.ended_turns


def content_key(parts: Iterable[object]) -> ContentKey:
    """The content of a message as sent (``UserMessage.content``) or as stored (a user
    Item's ``content``), in a form the two compare equal by."""
    key: list[tuple[str, str]] = []
    for part in parts:
        kind = str(getattr(part, "type", ""))
        value = getattr(part, "text", None)
        if value is None:
            value = getattr(part, "image_url", "")
        key.append((kind, str(value)))
    return tuple(key)


def _sendable(key: CallKey) -> bool:
    """Whether a result naming ``key`` can be sent: JSON goes out as UTF-8."""
    try:
        "".join((key.session_id, key.turn_id, key.call_id)).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def heeds(event: SessionEvent) -> bool:
    """Whether :meth:`RunnerCore.on_event` may act on ``event``. Drivers hand the core
    only these: text deltas, content parts, a Turn starting, a call whose arguments are
    still streaming change nothing, and a round for each would cost as much as a call's."""
    if isinstance(event, (SessionSnapshotEvent, TerminalTurnEvent)):
        return True
    if isinstance(event, (ItemAddedEvent, ItemDoneEvent)):
        item = event.item
        if isinstance(item, FunctionCallItem):
            return _is_complete_call(event, item)
        if isinstance(item, MessageItem):
            return isinstance(event, ItemDoneEvent) or item.role == "user"
        return isinstance(item, FunctionCallOutputItem)
    return False


def _is_complete_call(event: ItemAddedEvent | ItemDoneEvent, item: FunctionCallItem) -> bool:
    """A call can run once its arguments are final: on ``item.done``, or an
    ``item.added`` that already reads completed."""
    return isinstance(event, ItemDoneEvent) or item.status == "completed"


def _url_of(error: Exception) -> str:
    """The URL a failed request went to, without credentials or query, to name in logs."""
    request = getattr(error, "request", None)
    if not isinstance(request, httpx.Request):
        return "the server"
    return str(request.url.copy_with(username=None, password=None, query=None))
