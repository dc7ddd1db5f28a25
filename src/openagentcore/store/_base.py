"""Behaviour shared by every store that is not about storage."""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import TypeVar

from . import _rules
from ._records import CallRecord, CallState

__all__ = ["Clock", "StoreBase", "normalize_find_filters", "validate_older_than"]

#: Returns the current time in Unix seconds; tests pass a fake one to expire leases.
Clock = Callable[[], float]

_Store = TypeVar("_Store", bound="StoreBase")


class StoreBase(abc.ABC):
    """Clock, staleness and context-manager support for the concrete stores."""

    def __init__(self, *, clock: Clock = time.time) -> None:
        self._clock = clock

    def is_stale(self, record: CallRecord, *, now: float | None = None) -> bool:
        return _rules.is_stale(record, now=self._clock() if now is None else now)

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
