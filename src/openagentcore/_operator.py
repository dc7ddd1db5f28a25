"""What a person does to a call no runner can settle alone: ``resolve_call``.

One implementation for ``openagentcore calls resolve``, for applications that offer
the same decision in their own tools, and for the simulator's operator, so that the
command's rules are the ones the simulator checks.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from .runner._results import checked_failure_event, success_event
from .store._base import StoreBase
from .store._exceptions import InvalidTransitionError, UnknownCallError
from .store._protocol import ResultStore
from .store._records import MANUAL_RERUN, CallKey, CallRecord, CallState, answer_idempotency_key
from .store._rules import encode_result

__all__ = ["Resolution", "ResolutionAction", "resolve_call"]

#: What :func:`resolve_call` did: ``"saved"`` a result for the next ``serve`` or
#: ``recover`` to submit; ``"cleared_to_rerun"`` the call, which the next runner serving
#: its function runs; ``"answered"`` on the server a call whose result it had refused.
ResolutionAction = Literal["saved", "cleared_to_rerun", "answered"]


class _Events(Protocol):
    def create(
        self, session_id: str, *, events: Iterable[Mapping[str, Any]], idempotency_key: str
    ) -> object: ...


class _Sessions(Protocol):
    @property
    def events(self) -> _Events: ...


class EventsClient(Protocol):
    """What :func:`resolve_call` needs of a client: ``sessions.events.create``, as
    :class:`~openagentcore.Client` has it."""

    @property
    def sessions(self) -> _Sessions: ...


@dataclass(frozen=True, slots=True)
class Resolution:
    """What :func:`resolve_call` did to one call."""

    key: CallKey
    action: ResolutionAction
    #: ``manual:output``, ``manual:failed`` or ``manual:rerun``, as the record keeps it.
    settled_by: str
    #: The record as stored afterwards.
    record: CallRecord
    #: The ``tool_result`` event saved or sent to the server; ``None`` for a rerun.
    answer: dict[str, Any] | None


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()


def resolve_call(
    store: ResultStore,
    key: CallKey,
    *,
    output: object = _UNSET,
    failed: str | None = None,
    rerun: bool = False,
    client: EventsClient | None = None,
) -> Resolution:
    """Settle by hand a call no runner can settle alone, once you know what its
    function did: exactly one of ``output`` (it succeeded with this value), ``failed``
    (it failed with this message) or ``rerun=True`` (run it again: its effect is safe
    to repeat).

    - A call in doubt (marked so, or started without a result by an owner that is
      gone): ``output`` and ``failed`` save a result that the next ``serve`` or
      ``recover`` of its Session submits; ``rerun`` leaves it in doubt, cleared to run
      again, and the next runner serving its function runs it. The record keeps its
      history: ``in_doubt_at``, the attempt count, and each decision in ``history``
      (with who ran the attempt it was about).
    - A ``rejected`` call (the server refused its saved result): ``output`` or
      ``failed`` is sent to the server at once through ``client`` (a
      :class:`~openagentcore.Client`), under an idempotency
      key of its own (calling again with the same answer is a retry), then the record is
      settled (``abandoned``), keeping the refused result. ``rerun`` is refused: the
      function already ran, and its result was the problem.

    Raises ``ValueError`` for an answer the server would refuse (the message names
    ``output`` or ``failed``), :class:`~openagentcore.UnknownCallError` for a call the
    store does not hold, :class:`~openagentcore.InvalidTransitionError` for a call that
    is neither in doubt nor rejected (still running, or with a saved result) or a
    rejected one without ``client``, and the client's
    :class:`~openagentcore.APIError` when the server does not take an answer: the store
    is then unchanged.
    """
    if not isinstance(store, StoreBase):
        raise TypeError(
            f"store must be one of openagentcore's result stores, got {type(store).__name__}"
        )
    chosen = [output is not _UNSET, failed is not None, rerun]
    if chosen.count(True) != 1:
        raise ValueError("pass exactly one of output=..., failed=... or rerun=True")
    event, settled_by = _answer(key, output, failed)
    record = store.get(key)
    if record is None:
        raise UnknownCallError(
            f"the store holds no call {key.call_id!r} of Session {key.session_id!r}"
        )
    if record.state is not CallState.REJECTED:
        settled = store.settle_by_hand(key, event, settled_by=settled_by)
        action: ResolutionAction = "cleared_to_rerun" if event is None else "saved"
        return Resolution(key, action, settled_by, settled, event)
    if event is None:
        raise InvalidTransitionError(
            f"call {key.call_id!r} is rejected: the server refused its result, so running "
            "the function again would not help; answer it instead (output or failed; "
            "--output or --failed on the command line)"
        )
    if client is None:
        raise InvalidTransitionError(
            f"call {key.call_id!r} is rejected: its answer goes to the server at once; "
            "pass client= (an openagentcore.Client)"
        )
    answered = _answer_refused(store, record, event, settled_by, client)
    return Resolution(key, "answered", settled_by, answered, event)


def _answer(key: CallKey, output: object, failed: str | None) -> tuple[dict[str, Any] | None, str]:
    """The ``tool_result`` event a person's decision saves or sends (``None`` for a
    rerun), and how the record names the decision."""
    if output is not _UNSET:
        try:
            return success_event(key, output), "manual:output"
        except ValueError as error:
            raise ValueError(f"output cannot be sent: {error}") from None
    if failed is not None:
        try:
            return checked_failure_event(key, failed), "manual:failed"
        except ValueError as error:
            raise ValueError(f"failed cannot be sent: {error}") from None
    return None, MANUAL_RERUN


def _answer_refused(
    store: ResultStore,
    record: CallRecord,
    event: dict[str, Any],
    settled_by: str,
    client: EventsClient,
) -> CallRecord:
    """Answer, on the server, a call whose saved result the server refused; then settle
    its record. The store's result is never replaced: a worker that read it before the
    refusal may still post it, and the server would then hold it."""
    key = record.key
    sent = client.sessions.events.create(
        key.session_id,
        events=[event],
        idempotency_key=answer_idempotency_key(record, encode_result(event)),
    )
    if inspect.isawaitable(sent):
        # An AsyncClient's request has not been sent: the record must not say it was.
        if inspect.iscoroutine(sent):
            sent.close()
        raise TypeError(
            "client must be a Client: an AsyncClient only sends the answer when awaited, "
            "and resolve_call does not await; call it from a thread with a Client"
        )
    assert isinstance(store, StoreBase)
    try:
        return store.settle_refused_by_hand(key, settled_by=settled_by)
    except InvalidTransitionError:
        # A worker settled it first: its own post of the refused result met the answer.
        current = store.get(key)
        assert current is not None
        return current
