"""Keeping the claims of calls alive while this runner holds them."""

from __future__ import annotations

import logging
import threading

from ..store import CallKey, ResultStore, StoreUnavailableError

__all__ = ["LeaseKeeper"]

logger = logging.getLogger("openagentcore.runner")


class LeaseKeeper:
    """Renews the lease of every call this runner holds, from a thread of its own.

    A call is held from its claim until its result is saved: while the function runs,
    and while a finished result waits for an unreachable store. Renewing apart from the
    loops that submit results means a slow request, a long retry or a busy event loop
    never lets a lease lapse, which would let another worker take the call over as in
    doubt while it is still running here.
    """

    def __init__(self, store: ResultStore, *, owner: str, lease_seconds: float) -> None:
        self._store = store
        self._owner = owner
        self._lease_seconds = lease_seconds
        self._held: set[CallKey] = set()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, key: CallKey) -> None:
        with self._lock:
            self._held.add(key)
            if self._thread is None and not self._stopped.is_set():
                self._thread = threading.Thread(
                    target=self._run, name="openagentcore-leases", daemon=True
                )
                self._thread.start()

    def release(self, key: CallKey) -> None:
        with self._lock:
            self._held.discard(key)

    def holds(self, key: CallKey) -> bool:
        with self._lock:
            return key in self._held

    def renew(self) -> None:
        """Renew every held lease once; store errors are logged and retried next round."""
        with self._lock:
            keys = list(self._held)
        for key in keys:
            try:
                renewed = self._store.renew_lease(
                    key, owner=self._owner, lease_seconds=self._lease_seconds
                )
            except StoreUnavailableError as exc:
                logger.warning("Could not renew leases, retrying next round: %s", exc)
                return
            if not renewed and self.holds(key):
                logger.warning("Lost the lease on call %s; another worker may take it", key.call_id)

    def close(self) -> None:
        with self._lock:
            self._stopped.set()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while not self._stopped.wait(self._lease_seconds / 3):
            self.renew()
