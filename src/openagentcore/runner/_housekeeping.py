"""The runner core's housekeeping: progress marks, lease renewals, store backoff.

None of it decides what happens to a call; it keeps the store's bookkeeping in step
with the decisions (:mod:`._calls`) and backs off while the store is unreachable.
"""

from __future__ import annotations

import logging

from ..store import (
    CallKey,
    CallState,
    StoreUnavailableError,
)
from ._core_base import CoreBase
from ._effects import (
    RenewLeases,
    StoreAnswer,
    WriteMarks,
)
from ._phases import Phase

__all__ = ["Housekeeping"]

#: While the store is unreachable, try it again after this many seconds, doubling up to
#: the cap: a database restart takes seconds, and nothing is lost by waiting.
STORE_RETRY_DELAY = 0.1

STORE_RETRY_MAX_DELAY = 5.0

#: Progress marks are written when this many are queued, or this many seconds after the
#: oldest, or when a serve ends.
MARK_BATCH = 64

MARK_DELAY = 0.5


class Housekeeping(CoreBase):
    """Progress marks written in batches, leases renewed, the store backed off."""

    def _housekeeping_due(self, now: float) -> None:
        """Write the progress marks and renew the leases due now."""
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

    def _housekeeping_wakeups(self, due: list[float]) -> None:
        """Add when marks are written and leases renewed next to ``due``."""
        if self._marks and not self._marks_writing:
            due.append(max(self._marks_due, self._store_retry_at))
        if self._renew_at is not None and not self._renewing:
            due.append(self._renew_at)

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
        if self._marks_failed:
            self._marks_failed = False
            self._touched_all = True  # a serve left waiting for marks may write them now

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
        self._touched_all = True  # serves of every Session waited for this write
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
                # Its record may still be this runner's claim that never ran: if a later
                # read finds it so, it is held and run, not taken for a call in doubt.
                self._unconfirmed[key] = call.attempts
                self._forget(call)
            else:
                self._say(
                    logging.WARNING,
                    "Lost the lease on call %s; another worker may take it",
                    key.call_id,
                )

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
