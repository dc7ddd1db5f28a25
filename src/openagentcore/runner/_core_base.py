"""The state every part of the runner's core shares, and the moves they all make.

:class:`CoreBase` holds what one runner knows (its calls, serves and Sessions, and the
bookkeeping of marks, leases and store backoff) and the primitives every concern uses:
moving a call along the table of :mod:`._phases`, settling it, emitting effects and
leaving notes. The concerns build on it in layers (:mod:`._housekeeping`,
:mod:`._serves`, :mod:`._calls`), and :class:`._core.RunnerCore` puts them together.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

from ..store import CallKey, CallRecord, CallState
from ..types import MessageItem
from ._effects import (
    CallSettled,
    ClaimCall,
    Effect,
    LogNote,
    Note,
    Outcome,
    Release,
    TakeOver,
)
from ._phases import Phase, check_move
from ._registry import FunctionRegistry, RegisteredFunction
from ._report import ServeReport

__all__ = [
    "IDLE_PHASES",
    "NOT_STARTED",
    "Call",
    "ContentKey",
    "CoreBase",
    "Mode",
    "Serve",
    "SessionView",
    "turn_over",
]

#: What a serve waits for: the Session idle, its Turn ended, ``stop()``, its stream
#: connected (``run_turn`` before it sends input), the stream to show the Item of the
#: input ``run_turn`` sent (and so its Turn), or one reconciliation (``recover``).
Mode = Literal["idle", "turn", "forever", "connected", "created", "once"]

#: What identifies a message by its content: each part's type and text or image.
ContentKey = tuple[tuple[str, str], ...]

#: Phases that keep the call's Session busy no more.
IDLE_PHASES = frozenset({Phase.POSTED, Phase.DONE})

#: Phases in which nothing was done for the call yet.
NOT_STARTED = frozenset({Phase.CLAIMING, Phase.LOOKING})
#: Phases in which a call of a served function keeps a concurrency slot for itself.
_SLOT_PHASES = frozenset({Phase.CLAIMING, Phase.TAKING_OVER, Phase.QUEUED})
#: Saved results waiting for their POST (now, or after a backoff).
_POSTABLE = frozenset({Phase.READY, Phase.BACKOFF})


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
    #: Its result was saved by someone else (another worker, or an earlier life of this
    #: one), who may have posted it: only the server can say whether it holds it.
    found_saved: bool = False
    unknown_call_tries: int = 0
    #: When it became ready to post (results of one read linger to go together).
    ready_at: float = 0.0
    #: Posted alone: it was in a batch the server refused as a whole.
    alone: bool = False
    #: Its output Item came through the stream while the POST was in flight.
    output_seen: bool = False
    #: ``time.monotonic()`` instant its function must end by, if it has a timeout.
    deadline: float | None = None
    #: The attempt whose function was asked to stop (its Turn cancelled, or a forced
    #: stop), if any: a later attempt on this worker is asked again when it must stop.
    cancelled_attempt: int | None = None
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
    #: The idempotent fast path: its function started as its claim was sent, and the
    #: claim is not answered yet. Nothing of the run is saved or posted until it is.
    claim_unanswered: bool = False
    #: Announced after this runner first saw its Session, or looked up and found with
    #: no record: its claim most likely wins, so an idempotent function may start with
    #: it. A call pending before then may be one a crashed runner left in doubt: it
    #: waits for its claim's answer.
    fresh: bool = False
    #: What its function gave (``event``, ``ran``) if it ended before that answer.
    parked: tuple[dict[str, Any] | None, bool] | None = None
    #: An idempotent result posted while its save is in flight: progress marks wait
    #: for the save (a mark needs a saved result); the last one asked for is kept here.
    save_unanswered: bool = False
    mark_after_save: CallState | None = None


@dataclass(slots=True)
class Serve:
    """One ``serve``, ``run_turn`` or ``recover`` call attached to a Session."""

    id: int
    session_id: str
    until: Mode
    report: ServeReport
    stopping: bool = False
    #: Once stopping: the calls of its Session in flight when it was stopped, the only
    #: ones it still waits for (later serves of the Session see theirs through).
    finishing: frozenset[CallKey] = frozenset()
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
class SessionView:
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


class CoreBase:
    """What a runner's core knows, and the moves every part of it makes.

    Not thread-safe: drivers call the core from one thread at a time (the sync driver
    holds a lock; the async driver calls it only from its event loop).
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
        idempotent_fast_path: bool = False,
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
        self._sessions: dict[str, SessionView] = {}
        self._last_serve_id = 0
        self._effects: list[Effect] = []
        self._notes: list[Note] = []
        self._running = 0
        #: Calls failed for their timeout whose function has not returned yet: each
        #: still holds a concurrency slot (its thread or task is busy).
        self._overrunning: dict[CallKey, str] = {}
        #: Idempotent runs whose claim was lost (or refused): asked to stop, their
        #: outcome is dropped, and each keeps its slot until its function returns. By
        #: call: the function's name, and whether the run was counted (at its timeout).
        self._dropped_runs: dict[CallKey, tuple[str, bool]] = {}
        #: Results posted as they are saved whose save is not answered yet: their
        #: progress marks wait for it, and so do the serves of their Sessions.
        self._saving_posted: set[CallKey] = set()
        #: Whether idempotent functions take the fast path (the runner's option).
        self.idempotent_fast_path = idempotent_fast_path
        #: Runs started with their claim that timed out before the claim was answered:
        #: their late outcome is kept beside the record only once the claim is won.
        self._unclaimed_overruns: set[CallKey] = set()
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
        #: Calls waiting for a slot, in line behind those.
        self._waiting: dict[CallKey, Call] = {}
        #: Saved results waiting for their POST, by Session: a Session with a POST in
        #: flight is passed over whole, however many results it holds back.
        self._postable: dict[str, dict[CallKey, Call]] = {}
        self._store_failures = 0
        self._store_retry_at = float("-inf")  # monotonic clocks may start anywhere
        #: Sessions whose serves may have become able to return since they were last
        #: judged (a call of theirs moved, the server answered about them): a round
        #: judges only their serves, so it costs what changed, not every serve.
        self._touched: dict[str, None] = {}  # an ordered set: rounds replay exactly
        #: Something any serve may wait on changed (progress marks written, a stop, a
        #: serve attached or changed by its driver): the next round judges them all.
        self._touched_all = True
        #: When each served Session is read next, for those that will be read: kept up
        #: to date for the Sessions touched since (``_reads_stale``, and all of them
        #: after ``_reads_all``), so a round does not look at every Session.
        self._next_reads: dict[str, float] = {}
        self._reads_stale: dict[str, None] = {}
        self._reads_all = True

    def _emit(self, call: Call, effect: Effect, now: float) -> None:
        if now < self._store_retry_at:
            call.retry = effect  # idle until the store is back: a pass may end now
            call.not_before = self._store_retry_at
            self._watch[call.key] = call
            self._touched[call.key.session_id] = None
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
        if not call.save_unanswered:  # a result posted before its save is still saved
            call.retry = None

    def _move(self, call: Call, phase: Phase) -> None:
        """Every phase change goes through here, along the table of legal moves (so a
        move nobody reasoned about fails loudly), and so ``busy`` and the kept
        concurrency slots need no scan."""
        check_move(call.phase, phase, call.key.call_id)
        call.phase = phase
        self._touched[call.key.session_id] = None
        if phase in _SLOT_PHASES and call.function is not None and self.calls.get(call.key) is call:
            self._reserved[call.key] = call
        elif self._reserved.get(call.key) is call:
            del self._reserved[call.key]
        if phase is Phase.WAITING and self.calls.get(call.key) is call:
            self._waiting[call.key] = call
        elif self._waiting.get(call.key) is call:
            del self._waiting[call.key]
        if phase in _POSTABLE and self.calls.get(call.key) is call:
            self._postable.setdefault(call.key.session_id, {})[call.key] = call
        else:
            self._unpost(call)
        view = self._sessions.get(call.key.session_id)
        if view is None or view.calls.get(call.key) is not call:
            return  # forgotten: a late answer moves it, but nobody waits on it
        if phase in IDLE_PHASES:
            view.unsettled.discard(call.key)
        else:
            view.unsettled.add(call.key)

    def _forget(self, call: Call) -> None:
        if call.save_unanswered:
            return  # posted, its save in flight: forgotten once the save is answered
        if self._reserved.get(call.key) is call:
            del self._reserved[call.key]
        if self._waiting.get(call.key) is call:
            del self._waiting[call.key]
        self._unpost(call)
        self.calls.pop(call.key, None)
        self._watch.pop(call.key, None)
        self._touched[call.key.session_id] = None
        view = self._view(call.key.session_id)
        view.calls.pop(call.key, None)
        view.unsettled.discard(call.key)

    def _unpost(self, call: Call) -> None:
        postable = self._postable.get(call.key.session_id)
        if postable is not None and postable.get(call.key) is call:
            del postable[call.key]
            if not postable:
                del self._postable[call.key.session_id]

    def _enter(self, call: Call, phase: Phase, now: float) -> None:
        """Move ``call`` to a phase the clockwork acts on (waiting, queued, ready,
        backoff); saved results are kept by Session, in ``_postable``."""
        self._move(call, phase)
        if phase not in _POSTABLE:
            self._watch[call.key] = call
        if phase is Phase.READY:
            call.ready_at = now

    def _give_back(self, call: Call, now: float) -> None:
        """Release a claim whose function never started."""
        self._move(call, Phase.RELEASING)
        call.lease_held = False
        self._emit(call, Release(call.key, self.owner), now)

    def _want_read(self, view: SessionView, now: float) -> None:
        self._touched[view.session_id] = None
        view.read_at = now if view.read_at is None else min(view.read_at, now)

    def _view(self, session_id: str) -> SessionView:
        view = self._sessions.get(session_id)
        if view is None:
            view = self._sessions[session_id] = SessionView(session_id)
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


def turn_over(view: SessionView, turn_id: str) -> bool:
    """Whether this runner knows the Turn takes no more results."""
    return turn_id in view.cancelled_turns or turn_id in view.ended_turns
