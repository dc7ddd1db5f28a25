"""A result store that lives in one process: for tests and throwaway runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from . import _rules
from ._base import Clock, StoreBase, normalize_find_filters, validate_older_than
from ._exceptions import StoreClosedError, UnknownCallError
from ._records import (
    PRUNABLE_STATES,
    CallKey,
    CallRecord,
    CallState,
    Claim,
    Liveness,
    process_liveness,
)

__all__ = ["MemoryResultStore"]


class MemoryResultStore(StoreBase):
    """Keeps records in a dict behind a lock; they vanish with the process.

    Results are kept as JSON text exactly like the durable stores, so records handed out
    are independent copies and a result that would not survive a database is refused here
    too.
    """

    def __init__(self, *, clock: Clock = time.time, liveness: Liveness = process_liveness) -> None:
        super().__init__(clock=clock, liveness=liveness)
        self._lock = threading.Lock()
        self._rows: dict[CallKey, _rules.Row] | None = {}

    def __repr__(self) -> str:
        count = "closed" if self._rows is None else f"{len(self._rows)} records"
        return f"<MemoryResultStore {count}>"

    def claim(
        self,
        key: CallKey,
        *,
        function_name: str,
        arguments_hash: str,
        owner: str,
        lease_seconds: float,
    ) -> Claim:
        with self._lock:
            rows = self._open_rows()
            existing = rows.get(key)
            if existing is not None:
                record = _rules.record_from_row(existing)
                now = self._clock()
                stale = _rules.is_stale(record, now=now, liveness=self._liveness)
                return Claim(won=False, record=record, stale=stale)
            record = _rules.started_record(
                key,
                function_name=function_name,
                arguments_hash=arguments_hash,
                owner=owner,
                lease_seconds=lease_seconds,
                now=self._clock(),
            )
            rows[key] = _rules.record_to_row(record, None)
            return Claim(won=True, record=record)

    def get(self, key: CallKey) -> CallRecord | None:
        with self._lock:
            row = self._open_rows().get(key)
        return None if row is None else _rules.record_from_row(row)

    def get_many(self, keys: Iterable[CallKey]) -> dict[CallKey, CallRecord]:
        """Every row under one hold of the lock, decoded after it."""
        with self._lock:
            rows = self._open_rows()
            found = [(key, row) for key in keys if (row := rows.get(key)) is not None]
        return {key: _rules.record_from_row(row) for key, row in found}

    def find(
        self,
        *,
        session_id: str | None = None,
        states: Iterable[CallState] | None = None,
        limit: int | None = None,
    ) -> list[CallRecord]:
        wanted, limit = normalize_find_filters(states, limit)
        with self._lock:
            rows = list(self._open_rows().values())
        records = [
            record
            for record in map(_rules.record_from_row, rows)
            if (session_id is None or record.key.session_id == session_id)
            and (wanted is None or record.state in wanted)
        ]
        records.sort(key=lambda r: (r.created_at, r.key.session_id, r.key.turn_id, r.key.call_id))
        return records if limit is None else records[:limit]

    def prune(self, *, older_than: float) -> int:
        validate_older_than(older_than)
        with self._lock:
            rows = self._open_rows()
            cutoff = self._clock() - older_than
            doomed = [
                key
                for key, row in rows.items()
                if CallState(row[5]) in PRUNABLE_STATES and row[12] < cutoff
            ]
            for key in doomed:
                del rows[key]
        return len(doomed)

    def close(self) -> None:
        with self._lock:
            self._rows = None

    def _open_rows(self) -> dict[CallKey, _rules.Row]:
        if self._rows is None:
            raise StoreClosedError("this MemoryResultStore is closed; create a new one")
        return self._rows

    def _update(
        self,
        key: CallKey,
        decide: Callable[[CallRecord, float], _rules.Decision],
        *,
        result_text: str | None = None,
        late_outcome_text: str | None = None,
    ) -> tuple[CallRecord, bool]:
        with self._lock:
            rows = self._open_rows()
            row = rows.get(key)
            if row is None:
                raise UnknownCallError(f"no record of {key!r}; claim the call first")
            current = _rules.record_from_row(row)
            updated = decide(current, self._clock())
            if updated is None:
                return current, False
            if isinstance(updated, _rules.Delete):
                del rows[key]
                return current, True
            stored_text = _first(row[_rules.RESULT_INDEX], result_text)
            late_text = _first(row[_rules.LATE_OUTCOME_INDEX], late_outcome_text)
            rows[key] = _rules.record_to_row(updated, stored_text, late_text)
            return updated, True


def _first(stored: str | None, given: str | None) -> str | None:
    """A text once stored is never replaced."""
    return stored if stored is not None else given
