"""The state machine every store follows, written once.

Each function takes the record as stored and returns the record to store instead, or
``None`` to leave it alone. The stores only add atomicity: they read, call one of these,
and write back inside a lock or a transaction. Rows are tuples in :data:`COLUMNS` order,
with the result (and a late outcome) kept as the JSON text first saved.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ._exceptions import InvalidTransitionError
from ._records import (
    FINISHED,
    MANUAL_RERUN,
    SETTLED_STATES,
    CallKey,
    CallRecord,
    CallState,
    Liveness,
    cleared_to_rerun,
    idempotency_key_for,
)

__all__ = [
    "CLAIM_COLUMNS",
    "COLUMNS",
    "Row",
    "DamagedRowError",
    "decode_result",
    "encode_late_outcome",
    "decode_history",
    "encode_history",
    "encode_result",
    "DELETE",
    "Decision",
    "Delete",
    "LATE_OUTCOME_INDEX",
    "RESULT_INDEX",
    "is_stale",
    "keep_late_outcome",
    "mark",
    "mark_in_doubt",
    "record_from_row",
    "record_to_row",
    "release",
    "renew_lease",
    "save_result",
    "settle_by_hand",
    "started_record",
    "take_over",
    "validate_lease",
]

#: The columns a claim writes, in stored-row order; the last three are times.
CLAIM_COLUMNS: tuple[str, ...] = (
    "session_id",
    "turn_id",
    "call_id",
    "function_name",
    "arguments_hash",
    "state",
    "result",
    "idempotency_key",
    "attempts",
    "owner",
    "lease_expires_at",
    "created_at",
    "updated_at",
)
#: Column order of a stored row; the SQL stores use these names for their columns.
COLUMNS: tuple[str, ...] = (
    *CLAIM_COLUMNS,
    "in_doubt_at",
    "settled_by",
    "late_outcome",
    "late_at",
    "history",
)
#: Where a row holds the JSON text of the result and of the late outcome.
RESULT_INDEX = COLUMNS.index("result")
LATE_OUTCOME_INDEX = COLUMNS.index("late_outcome")

Row = tuple[Any, ...]

_RUNNABLE = frozenset({CallState.STARTED, CallState.IN_DOUBT})
#: What a refused result may still become: applied (settled by hand, or the server took it
#: after all) or abandoned. Submitting it again is a backward move.
_AFTER_REJECTED = frozenset({CallState.APPLIED, CallState.ABANDONED})


class Delete:
    """Returned by a rule to delete the record instead of replacing it."""

    def __repr__(self) -> str:
        return "DELETE"


DELETE = Delete()
#: What a rule decides: the record to store, :data:`DELETE`, or ``None`` (no change).
Decision = CallRecord | Delete | None


def validate_lease(lease_seconds: float) -> None:
    if not lease_seconds > 0:
        raise ValueError(
            f"lease_seconds must be a positive number of seconds, got {lease_seconds!r}"
        )


def encode_result(result: Mapping[str, Any]) -> str:
    """The JSON text to store; fails before anything is written if ``result`` is not JSON."""
    if not isinstance(result, Mapping):
        raise TypeError(f"result must be a mapping (the tool_result event), got {type(result)!r}")
    try:
        return json.dumps(dict(result), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"result must be JSON-serializable, since it is sent as the event body: {exc}"
        ) from None


#: The deepest nesting a late outcome keeps as is; anything deeper is replaced by a note.
_LATE_OUTCOME_DEPTH = 64
#: The longest description kept of a value JSON cannot hold.
_DESCRIPTION_LIMIT = 1000


def encode_late_outcome(outcome: Mapping[str, Any]) -> str:
    """The JSON text of a late outcome to keep: strict JSON, valid UTF-8, whatever it holds.

    A function's output can follow from the model's arguments, so this never fails on
    content: a value JSON cannot hold (NaN, a lone surrogate, an object, nesting too deep,
    an integer too long to print) is kept as readable text instead. Plain JSON is kept as is.
    """
    if not isinstance(outcome, Mapping):
        raise TypeError(
            f"a late outcome must be a mapping (a tool_result event), got {type(outcome)!r}"
        )
    try:
        text = json.dumps(dict(outcome), ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")  # refuses lone surrogates, which no database stores
    except (TypeError, ValueError, RecursionError):
        text = json.dumps(_storable(outcome), ensure_ascii=False, allow_nan=False)
    return text


def _storable(value: object) -> Any:
    """A copy of ``value`` that strict JSON holds, built without recursion."""
    root: list[Any] = [None]
    stack: list[tuple[object, Any, Any, int]] = [(value, root, 0, 0)]
    while stack:
        item, parent, slot, depth = stack.pop()
        if not isinstance(item, (Mapping, list, tuple)):
            parent[slot] = _storable_leaf(item)
        elif depth >= _LATE_OUTCOME_DEPTH:
            parent[slot] = f"(nested deeper than {_LATE_OUTCOME_DEPTH} levels; not kept)"
        elif isinstance(item, Mapping):
            members: dict[str, Any] = {}
            for name, member in item.items():
                text = _clean_text(name if isinstance(name, str) else _describe(name))
                members[text] = None  # keeps the order; filled in from the stack
                stack.append((member, members, text, depth + 1))
            parent[slot] = members
        else:
            elements: list[Any] = [None] * len(item)
            stack.extend((member, elements, index, depth + 1) for index, member in enumerate(item))
            parent[slot] = elements
    return root[0]


def _storable_leaf(item: object) -> Any:
    if item is None or isinstance(item, bool):
        return item
    if isinstance(item, str):
        return _clean_text(item)
    if isinstance(item, int):
        try:
            int.__repr__(item)  # what json.dumps calls; too many digits raise
        except ValueError:
            return f"(an integer of {item.bit_length()} bits; not kept)"
        return int(item)
    if isinstance(item, float):
        return float(item) if math.isfinite(item) else repr(float(item))
    return _clean_text(_describe(item))


def _describe(item: object) -> str:
    try:
        text = repr(item)
    except Exception:
        text = f"<{type(item).__name__}>"
    return text[:_DESCRIPTION_LIMIT]


def _clean_text(text: str) -> str:
    """``text`` with each lone surrogate spelled as its escape, ``\\udc80``."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def decode_result(text: str | None) -> dict[str, Any] | None:
    """A stored result; ``JSONDecodeError`` for text that is not a JSON object (a row
    damaged by hand or by another tool), which the stores report as damage."""
    if text is None:
        return None
    decoded = json.loads(text)
    if not isinstance(decoded, dict):
        raise json.JSONDecodeError("a saved result is not a JSON object", text, 0)
    return decoded


def record_to_row(
    record: CallRecord, result_text: str | None, late_outcome_text: str | None = None
) -> Row:
    key = record.key
    return (
        key.session_id,
        key.turn_id,
        key.call_id,
        record.function_name,
        record.arguments_hash,
        record.state.value,
        result_text,
        record.idempotency_key,
        record.attempts,
        record.owner,
        record.lease_expires_at,
        record.created_at,
        record.updated_at,
        record.in_doubt_at,
        record.settled_by,
        late_outcome_text,
        record.late_at,
        encode_history(record.history),
    )


def encode_history(history: Sequence[Mapping[str, Any]]) -> str | None:
    """The JSON text of a record's decisions by hand; ``None`` (NULL) while it has none."""
    return json.dumps(list(history), ensure_ascii=False) if history else None


def decode_history(text: str | None) -> tuple[dict[str, Any], ...]:
    """Stored decisions; ``ValueError`` for text that is not a list of JSON objects."""
    if text is None:
        return ()
    decoded = json.loads(text)
    if not isinstance(decoded, list) or not all(isinstance(entry, dict) for entry in decoded):
        raise json.JSONDecodeError("the history is not a list of JSON objects", text, 0)
    return tuple(decoded)


class DamagedRowError(ValueError):
    """A stored row that cannot be read back as a record (changed by hand or by another
    tool); the stores raise it as ``StoreCorruptError``."""


def record_from_row(row: Sequence[Any]) -> CallRecord:
    """The record a row holds; ``DamagedRowError`` for one that cannot be read."""
    try:
        return _record_from_row(row)
    except (TypeError, ValueError, OverflowError) as exc:  # JSONDecodeError included
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise DamagedRowError(f"the row of call {row[2]!r} cannot be read ({reason})") from exc


def _record_from_row(row: Sequence[Any]) -> CallRecord:
    lease = row[10]
    return CallRecord(
        key=CallKey(session_id=row[0], turn_id=row[1], call_id=row[2]),
        function_name=row[3],
        arguments_hash=row[4],
        state=CallState(row[5]),
        result=decode_result(row[6]),
        idempotency_key=row[7],
        attempts=int(row[8]),
        owner=row[9],
        lease_expires_at=None if lease is None else float(lease),
        created_at=float(row[11]),
        updated_at=float(row[12]),
        in_doubt_at=None if row[13] is None else float(row[13]),
        settled_by=row[14],
        late_outcome=decode_result(row[15]),
        late_at=None if row[16] is None else float(row[16]),
        history=decode_history(row[17]),
    )


def started_record(
    key: CallKey,
    *,
    function_name: str,
    arguments_hash: str,
    owner: str,
    lease_seconds: float,
    now: float,
) -> CallRecord:
    """The record a winning claim inserts."""
    validate_lease(lease_seconds)
    return CallRecord(
        key=key,
        function_name=function_name,
        arguments_hash=arguments_hash,
        state=CallState.STARTED,
        result=None,
        idempotency_key=idempotency_key_for(key),
        attempts=1,
        owner=owner,
        lease_expires_at=now + lease_seconds,
        created_at=now,
        updated_at=now,
    )


def is_stale(record: CallRecord, *, now: float, liveness: Liveness) -> bool:
    """A started call without a result whose owner can no longer be trusted to finish it.

    An owner ``liveness`` knows to be running is trusted whatever its lease says: a
    clock that steps forward, or a process paused for a while, makes a lease look
    expired while its owner still runs the function. One it knows to be gone is not
    trusted, however long its lease.
    """
    if record.state is not CallState.STARTED or record.has_result():
        return False
    expired = record.lease_expires_at is None or record.lease_expires_at <= now
    if record.owner is None:
        return expired
    known = liveness(record.owner)
    return known is not True if expired else known is False


def take_over(
    record: CallRecord,
    *,
    owner: str,
    lease_seconds: float,
    expected_attempts: int,
    now: float,
    liveness: Liveness,
) -> CallRecord | None:
    """Re-claim a call nobody is running any more.

    Allowed for a call without a result that is in doubt, stale, or already held by
    ``owner``, and only while ``attempts`` still equals ``expected_attempts``, so that of
    several runners reacting to the same stale record exactly one wins.
    """
    validate_lease(lease_seconds)
    if record.state not in _RUNNABLE or record.has_result():
        return None
    if record.attempts != expected_attempts:
        return None
    takeable = (
        record.state is CallState.IN_DOUBT
        or record.owner == owner
        or is_stale(record, now=now, liveness=liveness)
    )
    if not takeable:
        return None
    # Taking over a call in doubt (or a stale one, which is in doubt) runs it again.
    doubted = record.state is CallState.IN_DOUBT or record.owner != owner
    settled_by = record.settled_by
    if doubted and not cleared_to_rerun(record):
        settled_by = "rerun"
    return replace(
        record,
        state=CallState.STARTED,
        attempts=record.attempts + 1,
        owner=owner,
        lease_expires_at=now + lease_seconds,
        updated_at=now,
        in_doubt_at=_first_doubt(record, now) if doubted else record.in_doubt_at,
        settled_by=settled_by,
    )


def _first_doubt(record: CallRecord, now: float) -> float:
    return now if record.in_doubt_at is None else record.in_doubt_at


def renew_lease(
    record: CallRecord, *, owner: str, lease_seconds: float, now: float
) -> CallRecord | None:
    """Extend the lease while ``owner`` still runs the call; ``None`` once it does not."""
    validate_lease(lease_seconds)
    if record.owner != owner or record.state is not CallState.STARTED or record.has_result():
        return None
    return replace(record, lease_expires_at=now + lease_seconds, updated_at=now)


def save_result(
    record: CallRecord, result: dict[str, Any], *, owner: str | None, now: float
) -> CallRecord | None:
    """Store the first result of a running call. A saved result is never replaced, and a
    settled call is left as it is (an abandoned call stays abandoned). A call a person
    cleared to run again takes a result from a run (``owner``), not from a runner's
    in-doubt policy (``owner=None``), before and after a runner took it over to run it."""
    if record.has_result() or record.state not in _RUNNABLE:
        return None
    if owner is None and record.state is CallState.STARTED and record.settled_by == MANUAL_RERUN:
        return None  # a policy answer decided before the rerun: the rerun settles it
    settled_by = record.settled_by
    if cleared_to_rerun(record):
        if owner is None:
            return None  # a runner's policy answer does not override a person's rerun
        settled_by = None  # the run thought lost finished after all: nobody settled it
    elif record.state is CallState.IN_DOUBT and owner is not None:
        # Another worker marked the call in doubt, then the run thought lost finished
        # after all: its own result, not anyone's answer to the doubt.
        settled_by = FINISHED
    elif record.state is CallState.IN_DOUBT and settled_by is None:
        # A runner's in-doubt policy answered without running the function again.
        settled_by = "failed" if result.get("success") is False else "result"
    return replace(
        record,
        state=CallState.COMPLETED,
        result=result,
        owner=record.owner if owner is None else owner,
        lease_expires_at=None,
        updated_at=now,
        settled_by=settled_by,
    )


def mark(record: CallRecord, state: CallState, *, now: float) -> CallRecord | None:
    """Move a call forward. A change that would move it backwards, or out of a settled
    state, is ignored: it is what a slower runner racing a faster one asks for."""
    state = CallState(state)
    if state in (CallState.STARTED, CallState.COMPLETED):
        method = "take_over()" if state is CallState.STARTED else "save_result()"
        raise InvalidTransitionError(
            f"mark() cannot set state {state.value!r}; use {method} instead"
        )
    current = record.state
    if current in SETTLED_STATES:
        return None
    if current is CallState.REJECTED and state not in _AFTER_REJECTED:
        return None
    if state is CallState.IN_DOUBT:
        if current is not CallState.STARTED or record.has_result():
            return None
    elif state in (CallState.SUBMITTED, CallState.APPLIED, CallState.REJECTED):
        if not record.has_result():
            raise InvalidTransitionError(
                f"cannot mark call {record.key.call_id!r} {state.value!r}: it has no saved "
                "result; call save_result() first"
            )
        if current is state:
            return None
    return replace(record, state=state, updated_at=now)


def mark_in_doubt(
    record: CallRecord, *, owner: str, expected_attempts: int, now: float, liveness: Liveness
) -> CallRecord | None:
    """Give up on a started call without a result, if it is still the attempt the caller
    saw (``expected_attempts``) and either ``owner`` holds it or it is stale at ``now``."""
    if record.state is not CallState.STARTED or record.has_result():
        return None
    if record.attempts != expected_attempts:
        return None
    if record.owner != owner and not is_stale(record, now=now, liveness=liveness):
        return None
    return replace(
        record,
        state=CallState.IN_DOUBT,
        updated_at=now,
        in_doubt_at=_first_doubt(record, now),
        settled_by=None,
    )


def release(record: CallRecord, *, owner: str, now: float) -> CallRecord | Delete | None:
    """Undo ``owner``'s claim on a call it never started running.

    A first claim leaves no trace (:data:`DELETE`): nothing ever ran. A later claim puts
    the call back in doubt with the attempt it took away, since the earlier attempt's
    doubt remains.
    """
    if record.state is not CallState.STARTED or record.has_result() or record.owner != owner:
        return None
    if record.attempts == 1:
        return DELETE
    return replace(
        record,
        state=CallState.IN_DOUBT,
        attempts=record.attempts - 1,
        lease_expires_at=None,
        updated_at=now,
        in_doubt_at=_first_doubt(record, now),
        # A person's "run it again" still stands: the released claim never ran it.
        settled_by=MANUAL_RERUN if record.settled_by == MANUAL_RERUN else None,
    )


def keep_late_outcome(
    record: CallRecord, outcome: dict[str, Any], *, now: float
) -> CallRecord | None:
    """Keep what the function produced after its timeout had failed the call. The first
    one kept stays; nothing the runner relies on changes: not the state, the result, the
    owner or the lease."""
    if record.late_outcome is not None:
        return None
    return replace(record, late_outcome=outcome, late_at=now, updated_at=now)


def settle_by_hand(
    record: CallRecord,
    result: dict[str, Any] | None,
    *,
    settled_by: str,
    now: float,
    liveness: Liveness,
) -> CallRecord | None:
    """A person settles a call in doubt (``openagentcore calls resolve``).

    With ``result``, it is saved for the next ``serve`` or ``recover`` to submit. Without,
    the call stays in doubt, marked ``settled_by`` (``manual:rerun``), and the next runner
    serving its function runs it again; the record keeps its history (``in_doubt_at``,
    ``attempts``, and the decision in ``history``). Only calls in doubt qualify: marked
    so, or started without a result by an owner that is gone.
    """
    if record.has_result():
        return None
    if record.state is not CallState.IN_DOUBT and not is_stale(record, now=now, liveness=liveness):
        return None
    history = _decided(record, settled_by, now)
    if result is None:
        return replace(
            record,
            state=CallState.IN_DOUBT,
            owner=None,
            lease_expires_at=None,
            updated_at=now,
            in_doubt_at=_first_doubt(record, now),
            settled_by=settled_by,
            history=history,
        )
    return replace(
        record,
        state=CallState.COMPLETED,
        result=result,
        owner=None,
        lease_expires_at=None,
        updated_at=now,
        in_doubt_at=_first_doubt(record, now),
        settled_by=settled_by,
        history=history,
    )


def answered_by_hand(record: CallRecord, *, settled_by: str, now: float) -> CallRecord | None:
    """A person answered, on the server, a call whose saved result the server refused
    (``openagentcore calls resolve``): nothing is left to do. The refused result stays as
    the evidence of what the function returned."""
    if record.state is not CallState.REJECTED:
        return None
    return replace(
        record,
        state=CallState.ABANDONED,
        updated_at=now,
        settled_by=settled_by,
        history=_decided(record, settled_by, now),
    )


def _decided(record: CallRecord, settled_by: str, now: float) -> tuple[dict[str, Any], ...]:
    """The record's history with a person's decision added, and what it was about."""
    decision = {
        "at": now,
        "settled_by": settled_by,
        "state": record.state.value,
        "attempts": record.attempts,
        "owner": record.owner,
    }
    return (*record.history, decision)
