"""What the runner core asks its drivers to do, and what they tell it back.

The core (:mod:`._core`) never performs I/O, reads a clock or runs user code. It
returns *effects* (claim this call, run that function, post these results) and learns
their outcomes as *answers*. Drivers carry effects out with threads or tasks; the
simulator under ``tests/sim`` carries them out on a simulated server, store and clock.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from typing import Any

from ..store import CallKey, CallRecord, CallState, Claim, ResultStore, StoreUnavailableError
from ..types import RequiredAction, Session, Turn
from ._context import CallContext, call_idempotency_key
from ._registry import RegisteredFunction

__all__ = [
    "Answers",
    "AskInDoubt",
    "Batch",
    "CallSettled",
    "CallStarted",
    "CancelFunction",
    "ClaimCall",
    "Effect",
    "FunctionOutcome",
    "InDoubtAnswer",
    "KeepLateOutcome",
    "Lookup",
    "LookupMany",
    "LogNote",
    "LookupResult",
    "Note",
    "MarkInDoubt",
    "Outcome",
    "PostOutcome",
    "PostResults",
    "ReadSession",
    "Release",
    "RenewLeases",
    "ReportAction",
    "RunFunction",
    "SaveResult",
    "SessionOutcome",
    "StoreAnswer",
    "StoreEffect",
    "TakeOver",
    "Verdict",
    "WriteMarks",
    "perform_store",
]


# -- store effects --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimCall:
    """Record the call as started by this runner unless a record exists."""

    key: CallKey
    function_name: str
    arguments_hash: str
    owner: str
    lease_seconds: float


@dataclass(frozen=True, slots=True)
class TakeOver:
    """Re-claim a call in doubt to run it again (compare-and-set on attempts)."""

    key: CallKey
    owner: str
    lease_seconds: float
    expected_attempts: int


@dataclass(frozen=True, slots=True)
class MarkInDoubt:
    """Move a started call without a result to in doubt (compare-and-set)."""

    key: CallKey
    owner: str
    expected_attempts: int


@dataclass(frozen=True, slots=True)
class Release:
    """Give back a claim whose function never started."""

    key: CallKey
    owner: str


@dataclass(frozen=True, slots=True)
class Lookup:
    """Read a call's record and whether the store judges it stale."""

    key: CallKey


@dataclass(frozen=True, slots=True)
class LookupMany:
    """The lookups of one round, in one read of the store (``ResultStore.get_many``):
    answered by :class:`Answers`, one :class:`StoreAnswer` per lookup, or by one error
    for all of them."""

    lookups: tuple[Lookup, ...]


@dataclass(frozen=True, slots=True)
class SaveResult:
    """Save the result event before it is posted; the first saved result wins."""

    key: CallKey
    event: dict[str, Any]
    owner: str | None


@dataclass(frozen=True, slots=True)
class KeepLateOutcome:
    """Keep what a function produced after its timeout, or after another worker settled
    its call, beside its record, for the operator; the saved result (what the model got)
    stays."""

    key: CallKey
    outcome: dict[str, Any]


@dataclass(frozen=True, slots=True)
class WriteMarks:
    """Progress marks (submitted, applied, abandoned, rejected), in one transaction."""

    changes: tuple[tuple[CallKey, CallState], ...]


@dataclass(frozen=True, slots=True)
class RenewLeases:
    """Push the leases of the calls this runner holds into the future."""

    keys: tuple[CallKey, ...]
    owner: str
    lease_seconds: float


StoreEffect = (
    ClaimCall
    | TakeOver
    | MarkInDoubt
    | Release
    | Lookup
    | LookupMany
    | SaveResult
    | KeepLateOutcome
    | WriteMarks
    | RenewLeases
)


# -- other effects --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Batch:
    """Saved results to post together in one ``events.create`` request."""

    session_id: str
    records: tuple[CallRecord, ...]

    @property
    def events(self) -> list[dict[str, Any]]:
        return [record.result for record in self.records if record.result is not None]

    @property
    def request(self) -> dict[str, Any]:
        """The arguments of the ``events.create`` call that posts the batch."""
        return {
            "session_id": self.session_id,
            "events": self.events,
            "idempotency_key": self.idempotency_key,
        }

    @property
    def idempotency_key(self) -> str:
        """A single result uses its call's stored key; a batch, a key derived from its
        calls, so a retry of the same batch is the same request."""
        if len(self.records) == 1:
            return self.records[0].idempotency_key
        joined = "\n".join(record.idempotency_key for record in self.records)
        return "oac-b-" + hashlib.sha256(joined.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class PostResults:
    batch: Batch


@dataclass(frozen=True, slots=True)
class RunFunction:
    """Start a registered function for one call; its outcome comes back as a
    :class:`FunctionOutcome`."""

    key: CallKey
    function: RegisteredFunction
    arguments: object
    attempt: int
    #: ``time.monotonic()`` instant after which the call is failed as timed out.
    deadline: float | None = None

    def context(self) -> CallContext:
        """The :class:`CallContext` the function receives."""
        key = self.key
        return CallContext(
            session_id=key.session_id,
            turn_id=key.turn_id,
            call_id=key.call_id,
            function_name=self.function.name,
            attempt=self.attempt,
            idempotency_key=call_idempotency_key(key.session_id, key.turn_id, key.call_id),
            deadline=self.deadline,
        )


@dataclass(frozen=True, slots=True)
class CancelFunction:
    """Ask a running function to stop: its Turn was cancelled or its time is up.
    Coroutine functions are cancelled; plain ones see ``ctx.cancelled`` set."""

    key: CallKey


@dataclass(frozen=True, slots=True)
class AskInDoubt:
    """Ask the application's ``on_in_doubt`` hook what to do with a call."""

    key: CallKey
    function_name: str
    arguments: object
    attempts: int


@dataclass(frozen=True, slots=True)
class ReadSession:
    """Read the Session (its ``required_actions`` are the truth) and, when a
    ``run_turn`` waits on one, that Turn."""

    session_id: str
    turn_id: str | None


@dataclass(frozen=True, slots=True)
class ReportAction:
    """Hand a required action that is not a function call to ``on_action``."""

    session_id: str
    action: RequiredAction


Effect = (
    StoreEffect
    | PostResults
    | RunFunction
    | CancelFunction
    | AskInDoubt
    | ReadSession
    | ReportAction
)


# -- answers --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LookupResult:
    record: CallRecord | None
    stale: bool


@dataclass(frozen=True, slots=True)
class StoreAnswer:
    """A store effect's outcome: ``value`` on success, else ``error``."""

    effect: StoreEffect
    value: Claim | CallRecord | LookupResult | Answers | bool | tuple[CallKey, ...] | None = None
    error: Exception | None = None


@dataclass(frozen=True, slots=True)
class Answers:
    """The answer of each lookup of a :class:`LookupMany`, in its order: a found record,
    or that lookup's own error (a row the store cannot read fails only its call)."""

    answers: tuple[StoreAnswer, ...]


@dataclass(frozen=True, slots=True)
class FunctionOutcome:
    """A function's result event; ``event`` is ``None`` when it ended without one
    (it raised ``SystemExit`` or the like, so its effect may have happened).
    ``ran`` is false when the function was never called (its arguments were invalid)."""

    key: CallKey
    event: dict[str, Any] | None
    ran: bool = True


@dataclass(frozen=True, slots=True)
class PostOutcome:
    batch: Batch
    error: Exception | None


@dataclass(frozen=True, slots=True)
class SessionOutcome:
    session_id: str
    session: Session | None
    turn: Turn | None = None
    error: Exception | None = None


class Verdict(str, enum.Enum):
    """What is decided for a call in doubt (``InDoubtDecision.kind``, as the core
    takes it)."""

    RERUN = "rerun"
    FAIL = "fail"
    RESULT = "result"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class InDoubtAnswer:
    key: CallKey
    kind: Verdict
    value: object = None
    error: str = ""


# -- notes: what happened to a call, for logs, traces and metrics ----------------------------


@dataclass(frozen=True, slots=True)
class CallStarted:
    """The function of a call started (``attempt`` counts runs across crashes)."""

    key: CallKey
    function_name: str
    attempt: int


class Outcome(str, enum.Enum):
    """Why this runner is done with a call. The values are what logs, spans and metrics
    show (``outcome=submitted``, ``openagentcore.call.outcome``): keep them stable."""

    #: The server accepted the result (202).
    SUBMITTED = "submitted"
    #: The result's output Item was seen: the Turn has it.
    APPLIED = "applied"
    #: Another worker (or an earlier run) settled it already.
    DUPLICATE = "duplicate"
    #: The server refused the result; a person settles it.
    REJECTED = "rejected"
    #: The server holds another result for the call.
    CONFLICT = "conflict"
    #: The Turn cannot take the result any more (cancelled, say); it stays saved.
    ABANDONED = "abandoned"
    #: A function this runner does not serve: left for a runner that does.
    LEFT_PENDING = "left_pending"
    #: In doubt, and only a runner serving its function can settle it.
    IN_DOUBT_ELSEWHERE = "in_doubt_elsewhere"
    #: Its claim was given back (or never made): its function never started here.
    RELEASED = "released"
    #: The Session no longer exists.
    SESSION_GONE = "session_gone"
    #: No serve follows its Session any more and its function never started.
    ABANDONED_BY_SERVE = "abandoned_by_serve"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class CallSettled:
    """This runner is done with a call, for the reason ``outcome`` says."""

    key: CallKey
    function_name: str
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class LogNote:
    """A line the core has for the operator's log: the observer logs it (on the
    ``openagentcore.runner`` logger) as ``logger.log(level, message, *args)`` would."""

    level: int
    message: str
    args: tuple[object, ...] = ()


Note = CallStarted | CallSettled | LogNote


def perform_store(effect: StoreEffect, store: ResultStore) -> StoreAnswer:
    """Carry out one store effect; errors are returned, never raised (the core
    decides what a failure means)."""
    try:
        return StoreAnswer(effect, _store_call(effect, store))
    except Exception as exc:  # the core tells unavailable from permanent errors
        return StoreAnswer(effect, error=exc)


def _store_call(
    effect: StoreEffect, store: ResultStore
) -> Claim | CallRecord | LookupResult | Answers | bool | tuple[CallKey, ...] | None:
    if isinstance(effect, LookupMany):
        return look_up_many(effect, store)
    if isinstance(effect, ClaimCall):
        return store.claim(
            effect.key,
            function_name=effect.function_name,
            arguments_hash=effect.arguments_hash,
            owner=effect.owner,
            lease_seconds=effect.lease_seconds,
        )
    if isinstance(effect, TakeOver):
        return store.take_over(
            effect.key,
            owner=effect.owner,
            lease_seconds=effect.lease_seconds,
            expected_attempts=effect.expected_attempts,
        )
    if isinstance(effect, MarkInDoubt):
        return store.mark_in_doubt(
            effect.key, owner=effect.owner, expected_attempts=effect.expected_attempts
        )
    if isinstance(effect, Release):
        return store.release(effect.key, owner=effect.owner)
    if isinstance(effect, Lookup):
        return _found(store.get(effect.key), store)
    if isinstance(effect, SaveResult):
        return store.save_result(effect.key, effect.event, owner=effect.owner)
    if isinstance(effect, KeepLateOutcome):
        return store.keep_late_outcome(effect.key, effect.outcome)
    if isinstance(effect, WriteMarks):
        store.mark_many(effect.changes)
        return None
    lost = tuple(
        key
        for key in effect.keys
        if not store.renew_lease(key, owner=effect.owner, lease_seconds=effect.lease_seconds)
    )
    return lost


def look_up_many(effect: LookupMany, store: ResultStore) -> Answers:
    """Every lookup of ``effect`` in one read (``get_many``; one ``get`` per key on a
    store without it). An unavailable store fails the whole batch (raised: every call
    waits for the store). Any other error (a damaged row, ids the store cannot hold)
    belongs to one call, which the batch cannot tell: each key is then read alone, so
    only that call gets the error."""

    def one_by_one() -> Answers:
        return Answers(tuple(perform_store(lookup, store) for lookup in effect.lookups))

    get_many = getattr(store, "get_many", None)
    if get_many is None:
        return one_by_one()
    try:
        found: dict[CallKey, CallRecord] = get_many([lookup.key for lookup in effect.lookups])
    except StoreUnavailableError:
        raise
    except Exception:
        return one_by_one()
    return Answers(
        tuple(
            StoreAnswer(lookup, _found(found.get(lookup.key), store)) for lookup in effect.lookups
        )
    )


def _found(record: CallRecord | None, store: ResultStore) -> LookupResult:
    """What a lookup found. Only a started call without a result can be stale (the
    store's rule): the others are not asked, which needs the clock (on PostgreSQL, a
    statement each)."""
    stale = (
        record is not None
        and record.state is CallState.STARTED
        and not record.has_result()
        and store.is_stale(record)
    )
    return LookupResult(record, stale)
