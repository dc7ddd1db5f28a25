"""Behaviour shared by every store that is not about storage."""

from __future__ import annotations

import abc
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar

from . import _rules
from ._exceptions import InvalidTransitionError, UnknownCallError
from ._records import CallKey, CallRecord, CallState, Claim, Liveness, process_liveness

__all__ = ["Clock", "StoreBase", "normalize_find_filters", "validate_older_than"]

#: Returns the current time in Unix seconds; tests pass a fake one to expire leases.
Clock = Callable[[], float]

_Store = TypeVar("_Store", bound="StoreBase")


class StoreBase(abc.ABC):
    """Clock, staleness, the state changes built on ``_update``, and context-manager
    support; concrete stores supply storage (``claim``, ``_update``, reads, ``close``)."""

    def __init__(self, *, clock: Clock = time.time, liveness: Liveness = process_liveness) -> None:
        self._clock = clock
        #: What the store knows of an owner beyond its lease: by default, this host's
        #: process table and this process's open runners.
        self._liveness = liveness

    def is_stale(self, record: CallRecord, *, now: float | None = None) -> bool:
        now = self._clock() if now is None else now
        return _rules.is_stale(record, now=now, liveness=self._liveness)

    def take_over(
        self, key: CallKey, *, owner: str, lease_seconds: float, expected_attempts: int
    ) -> Claim:
        record, changed = self._update(
            key,
            lambda current, now: _rules.take_over(
                current,
                owner=owner,
                lease_seconds=lease_seconds,
                expected_attempts=expected_attempts,
                now=now,
                liveness=self._liveness,
            ),
        )
        return Claim(won=changed, record=record)

    def renew_lease(self, key: CallKey, *, owner: str, lease_seconds: float) -> bool:
        _rules.validate_lease(lease_seconds)
        try:
            _, changed = self._update(
                key,
                lambda current, now: _rules.renew_lease(
                    current, owner=owner, lease_seconds=lease_seconds, now=now
                ),
            )
        except UnknownCallError:
            return False
        return changed

    def save_result(
        self, key: CallKey, result: Mapping[str, Any], *, owner: str | None
    ) -> CallRecord:
        text = _rules.encode_result(result)
        saved = _rules.decode_result(text)
        assert saved is not None
        record, _ = self._update(
            key,
            lambda current, now: _rules.save_result(current, saved, owner=owner, now=now),
            result_text=text,
        )
        return record

    def mark(self, key: CallKey, state: CallState) -> None:
        self._update(key, lambda current, now: _rules.mark(current, state, now=now))

    def keep_late_outcome(self, key: CallKey, outcome: Mapping[str, Any]) -> CallRecord:
        text = _rules.encode_late_outcome(outcome)
        kept = _rules.decode_result(text)
        assert kept is not None
        record, _ = self._update(
            key,
            lambda current, now: _rules.keep_late_outcome(current, kept, now=now),
            late_outcome_text=text,
        )
        return record

    def mark_in_doubt(self, key: CallKey, *, owner: str, expected_attempts: int) -> bool:
        _, changed = self._update(
            key,
            lambda current, now: _rules.mark_in_doubt(
                current,
                owner=owner,
                expected_attempts=expected_attempts,
                now=now,
                liveness=self._liveness,
            ),
        )
        return changed

    def release(self, key: CallKey, *, owner: str) -> bool:
        try:
            _, changed = self._update(
                key, lambda current, now: _rules.release(current, owner=owner, now=now)
            )
        except UnknownCallError:
            return False
        return changed

    def settle_by_hand(
        self, key: CallKey, result: Mapping[str, Any] | None, *, settled_by: str
    ) -> CallRecord:
        """Settle a call in doubt by hand: save ``result`` (the ``tool_result`` event) for
        the next ``serve`` or ``recover`` to submit, or with ``None`` clear the call to run
        again (``settled_by="manual:rerun"``): the next runner serving its function runs
        it. Returns the record now stored; raises :class:`InvalidTransitionError` for
        a call not in doubt."""
        text = None if result is None else _rules.encode_result(result)
        saved = _rules.decode_result(text)
        record, changed = self._update(
            key,
            lambda current, now: _rules.settle_by_hand(
                current, saved, settled_by=settled_by, now=now, liveness=self._liveness
            ),
            result_text=text,
        )
        if not changed:
            if (
                record.owner is not None
                and not record.has_result()
                and self._liveness(record.owner) is True
            ):
                raise InvalidTransitionError(
                    f"call {key.call_id!r} is started and its worker ({record.owner}) is still "
                    "running on this host, so it is not in doubt, however old its lease: it "
                    "saves a result when its function ends; stop that process first to settle "
                    "the call by hand"
                )
            raise InvalidTransitionError(
                f"call {key.call_id!r} is {record.state.value}"
                f"{' with a saved result' if record.has_result() else ''}, not in doubt; "
                "only a call in doubt can be resolved by hand"
            )
        return record

    def settle_refused_by_hand(self, key: CallKey, *, settled_by: str) -> CallRecord:
        """Record that a person answered, on the server, a call whose saved result the
        server refused: the call is settled (``ABANDONED``, ``settled_by``) and keeps the
        refused result. Raises :class:`InvalidTransitionError` for a call not rejected."""
        record, changed = self._update(
            key,
            lambda current, now: _rules.answered_by_hand(current, settled_by=settled_by, now=now),
        )
        if not changed:
            raise InvalidTransitionError(
                f"call {key.call_id!r} is {record.state.value}, no longer rejected"
            )
        return record

    def get_many(self, keys: Iterable[CallKey]) -> dict[CallKey, CallRecord]:
        """One :meth:`get` per key, for a store that has no batched read."""
        found: dict[CallKey, CallRecord] = {}
        for key in keys:
            record = self.get(key)
            if record is not None:
                found[key] = record
        return found

    @abc.abstractmethod
    def get(self, key: CallKey) -> CallRecord | None:
        """The call's record, or ``None`` if the store never saw it."""

    def mark_many(self, changes: Iterable[tuple[CallKey, CallState]]) -> None:
        for key, state in changes:
            with contextlib.suppress(UnknownCallError):
                self.mark(key, state)

    @abc.abstractmethod
    def _update(
        self,
        key: CallKey,
        decide: Callable[[CallRecord, float], _rules.Decision],
        *,
        result_text: str | None = None,
        late_outcome_text: str | None = None,
    ) -> tuple[CallRecord, bool]:
        """Atomically read ``key``'s record, let ``decide`` compute its next version
        (``None``: no change; ``_rules.DELETE``: delete it) and store it; returns the
        record now stored (the old one if deleted) and whether anything changed. The
        texts are stored for a record that has no result or late outcome yet. Raises
        ``UnknownCallError`` if missing."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections and files; the store cannot be used afterwards."""

    def __enter__(self: _Store) -> _Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def normalize_find_filters(
    states: Iterable[CallState] | None, limit: int | None
) -> tuple[frozenset[CallState] | None, int | None]:
    """Check ``find`` arguments once for every store."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be None or >= 0, got {limit!r}")
    if states is None:
        return None, limit
    return frozenset(CallState(state) for state in states), limit


def validate_older_than(older_than: float) -> None:
    if not older_than >= 0:
        raise ValueError(f"older_than must be a number of seconds >= 0, got {older_than!r}")
