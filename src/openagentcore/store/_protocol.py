"""The interface the function runner relies on; every store implements it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from ._records import CallKey, CallRecord, CallState, Claim

__all__ = ["ResultStore"]


@runtime_checkable
class ResultStore(Protocol):
    """Durable memory of function calls, shared by every runner that serves the same Agent.

    All methods are synchronous and safe to call from several threads; async code calls
    them through ``asyncio.to_thread``. Each method is atomic: two runners racing on the
    same call never both win a claim or both replace a result.

    Leases and staleness are judged by the store's clock inside the same atomic step:
    :class:`PostgresResultStore` uses the database server's clock, so workers with skewed
    clocks still agree; the other stores use the ``clock`` they were given.
    """

    def claim(
        self,
        key: CallKey,
        *,
        function_name: str,
        arguments_hash: str,
        owner: str,
        lease_seconds: float,
    ) -> Claim:
        """Record the call as started by ``owner`` unless any record of it exists.

        The first claim inserts a ``STARTED`` record with ``attempts=1`` and wins. Every
        later claim loses and gets the record as stored, whatever its state, with
        ``stale`` telling whether that record was stale (see :meth:`is_stale`) by the
        store's clock at that moment.
        """
        ...

    def take_over(
        self, key: CallKey, *, owner: str, lease_seconds: float, expected_attempts: int
    ) -> Claim:
        """Re-claim a call without a result that is ``IN_DOUBT``, stale (see
        :meth:`is_stale`) or already held by ``owner``, to run it again.

        Compare-and-set on ``attempts``: wins only if the stored count still equals
        ``expected_attempts``, then sets ``STARTED``, the new owner and lease, and counts one
        more attempt. Raises ``UnknownCallError`` when there is no record.
        """
        ...

    def renew_lease(self, key: CallKey, *, owner: str, lease_seconds: float) -> bool:
        """Push the lease ``lease_seconds`` into the future. ``False`` means ``owner`` no
        longer runs the call (taken over, marked in doubt, completed or settled)."""
        ...

    def save_result(
        self, key: CallKey, result: Mapping[str, Any], *, owner: str | None
    ) -> CallRecord:
        """Save the event to submit and move a running call to ``COMPLETED``.

        A saving ``owner`` becomes the record's owner (``None`` keeps the current one) and
        the lease is cleared: a saved result needs no one running the function.

        The first saved result wins: if one exists, or the call is settled, the record is
        returned unchanged, so submit ``record.result`` rather than your own. Raises
        ``UnknownCallError`` when there is no record.
        """
        ...

    def keep_late_outcome(self, key: CallKey, outcome: Mapping[str, Any]) -> CallRecord:
        """Keep what a function produced after its ``timeout`` had failed the call (the
        ``tool_result`` event it would have sent) as ``record.late_outcome``, with the
        store's time as ``late_at``, for the operator.

        Changes nothing else a runner relies on: not the state, the saved result, the
        idempotency key, the owner or the lease. The first late outcome kept stays. Never
        fails on content: what strict JSON cannot hold is kept as readable text. Raises
        ``UnknownCallError`` when there is no record.
        """
        ...

    def mark(self, key: CallKey, state: CallState) -> None:
        """Move a call to ``SUBMITTED``, ``APPLIED``, ``REJECTED``, ``ABANDONED`` or
        ``IN_DOUBT``.

        Backward moves are ignored, as is any move out of a settled state. ``SUBMITTED``,
        ``APPLIED`` and ``REJECTED`` need a saved result (``InvalidTransitionError``
        otherwise). A ``REJECTED`` call (the server refused its result) moves only to
        ``APPLIED`` or ``ABANDONED``. ``IN_DOUBT`` applies to any ``STARTED`` call without
        a result, whoever holds it: runners use :meth:`mark_in_doubt`, which checks the
        attempt and the lease. Raises ``UnknownCallError`` when there is no record.
        """
        ...

    def mark_in_doubt(self, key: CallKey, *, owner: str, expected_attempts: int) -> bool:
        """Give up on a ``STARTED`` call without a result: move it to ``IN_DOUBT``.

        Compare-and-set: changes the record only while ``attempts`` equals
        ``expected_attempts`` and either ``owner`` holds the call or it is stale by the
        store's clock, so a worker never marks in doubt a call another worker still
        runs. Returns whether it changed the record. Raises ``UnknownCallError`` when
        there is no record.
        """
        ...

    def release(self, key: CallKey, *, owner: str) -> bool:
        """Give back a claim ``owner`` holds but never started running.

        Only for a ``STARTED`` call without a result held by ``owner``: a first claim
        (``attempts == 1``) is deleted, as if never made; a later one goes back to
        ``IN_DOUBT`` with one attempt fewer, since the earlier attempt's doubt remains.
        Returns whether it changed anything (``False`` also when there is no record).
        """
        ...

    def mark_many(self, changes: Iterable[tuple[CallKey, CallState]]) -> None:
        """Apply several :meth:`mark` changes at once (in one transaction where the
        store has them). Calls without a record are skipped: progress marks are
        bookkeeping, written in batches after the fact."""
        ...

    def get(self, key: CallKey) -> CallRecord | None:
        """The call's record, or ``None`` if the store never saw it."""
        ...

    def get_many(self, keys: Iterable[CallKey]) -> dict[CallKey, CallRecord]:
        """The records of ``keys`` the store has, by key; keys it never saw are left out.

        What :meth:`get` gives for each key, read in as few statements as the store can
        (a restart looks up thousands of calls at once). A damaged row fails the whole
        lookup, as :meth:`get` fails on it.
        """
        ...

    def find(
        self,
        *,
        session_id: str | None = None,
        states: Iterable[CallState] | None = None,
        limit: int | None = None,
    ) -> list[CallRecord]:
        """Records matching every given filter, oldest first (by ``created_at``)."""
        ...

    def is_stale(self, record: CallRecord, *, now: float | None = None) -> bool:
        """Whether a ``STARTED`` call without a result has an expired lease or a dead owner.

        ``now`` defaults to the store's clock (on PostgreSQL, the database's).
        """
        ...

    def prune(self, *, older_than: float) -> int:
        """Delete records that need nothing more (applied, abandoned, or submitted: the
        server has the result) and were not updated in the last ``older_than`` seconds;
        returns how many were deleted. Records without a confirmed submission stay, and
        so do ``REJECTED`` ones: the call may still be pending on the server."""
        ...

    def close(self) -> None:
        """Release connections and files; the store cannot be used afterwards."""
        ...
