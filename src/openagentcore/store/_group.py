"""Group commit: changes that threads make at the same time share one transaction.

A thread with a change to write leads a commit at once when a commit slot is free (a
lone change never waits for company). Otherwise it queues the change and sleeps; when a
commit ends, its leader hands the slot to the first queued thread, which commits every
change queued by then (up to a limit) in one transaction and one disk sync. Each
change's caller gets its own return value or error, woken the moment its commit ends.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

from ._sql import Transaction

__all__ = ["GroupCommit", "PendingWrite"]

T = TypeVar("T")


class PendingWrite(Generic[T]):
    """One caller's change, waiting for the commit that runs it."""

    __slots__ = ("done", "error", "leads", "order", "result", "synced", "wake", "work")

    def __init__(
        self, work: Callable[[Transaction], T], synced: bool, order: tuple[str, ...] | None
    ) -> None:
        self.work = work
        #: The key of the first row the change locks (``None``: many rows, or none).
        self.order = order
        #: Whether the change must be on disk when its caller returns (not a progress mark).
        self.synced = synced
        self.done = False
        #: Set when a commit that ended hands its slot to this queued change's thread.
        self.leads = False
        self.result: T | None = None
        self.error: BaseException | None = None
        #: Held while the caller sleeps in the queue; released to wake it.
        self.wake: threading.Lock | None = None

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return cast(T, self.result)


class GroupCommit:
    """Runs callers' changes through ``commit``, at most ``slots`` commits at a time,
    each taking at most ``limit`` changes. ``commit`` sets each change's ``result`` or
    ``error``; an exception it raises becomes every change's error. One that is not an
    ``Exception`` (``KeyboardInterrupt`` in the leading thread) is raised there again,
    and the other callers get ``interrupted()`` instead."""

    def __init__(
        self,
        commit: Callable[[list[PendingWrite[Any]]], None],
        *,
        slots: int,
        limit: int,
        interrupted: Callable[[], Exception],
    ) -> None:
        self._commit = commit
        self._interrupted = interrupted
        self._limit = limit
        self._state = threading.Lock()
        self._free = slots
        self._queue: collections.deque[PendingWrite[Any]] = collections.deque()
        #: How many commits ran, and how many changes they carried: for tests and tuning.
        self.commits = 0
        self.changes = 0

    def run(
        self,
        work: Callable[[Transaction], T],
        *,
        synced: bool = True,
        order: tuple[str, ...] | None = None,
    ) -> T:
        pending: PendingWrite[T] = PendingWrite(work, synced, order)
        with self._state:
            leads = self._free > 0
            if leads:  # nothing is queued while a slot is free
                self._free -= 1
            else:
                pending.wake = threading.Lock()
                pending.wake.acquire()
                self._enqueue(pending)
        if not leads:
            try:
                pending.wake.acquire()  # type: ignore[union-attr]  # set above
            except BaseException:  # a signal's exception while asleep: nobody is left waiting
                self._abandon(pending)
                raise
            if pending.done:
                return pending.outcome()
            # Woken to lead: the slot of the commit that just ended is this thread's now.
        self._lead(pending)
        return pending.outcome()

    def _abandon(self, pending: PendingWrite[Any]) -> None:
        """Take back a change whose caller stopped waiting: unqueue it, or pass on the
        slot it was handed (a change already in a commit is committed all the same)."""
        with self._state:
            if pending in self._queue:
                self._queue.remove(pending)
                return
            if not pending.leads:
                return
            successor = self._handed_on()
        if successor is not None:
            assert successor.wake is not None
            successor.wake.release()

    def _handed_on(self) -> PendingWrite[Any] | None:
        """The queued change whose thread leads next, or ``None`` with the slot freed
        (called holding ``_state``)."""
        if not self._queue:
            self._free += 1
            return None
        successor = self._queue.popleft()
        successor.leads = True
        return successor

    def _enqueue(self, pending: PendingWrite[Any]) -> None:
        """Queue a change behind the commits in progress (called holding ``_state``)."""
        self._queue.append(pending)

    def queued(self) -> int:
        """How many changes wait for a commit slot."""
        with self._state:
            return len(self._queue)

    def _lead(self, first: PendingWrite[Any]) -> None:
        with self._state:
            batch = [first]
            while self._queue and len(batch) < self._limit:
                batch.append(self._queue.popleft())
        try:
            self._run_batch(batch)
        finally:
            with self._state:
                self.commits += 1
                self.changes += len(batch)
                for pending in batch:
                    pending.done = True
                successor = self._handed_on()
            for pending in batch[1:]:
                assert pending.wake is not None
                pending.wake.release()
            if successor is not None:
                assert successor.wake is not None
                successor.wake.release()  # not done: it leads the next commit

    def _run_batch(self, batch: list[PendingWrite[Any]]) -> None:
        try:
            self._commit(batch)
        except Exception as exc:
            for pending in batch:
                pending.result, pending.error = None, exc
        except BaseException:
            failure = self._interrupted()
            for pending in batch:
                pending.result, pending.error = None, failure
            raise
