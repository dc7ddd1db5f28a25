"""Counts the SQL statements this process sends through psycopg, split into the
fleet's (its directory tables, LISTEN and NOTIFY) and the rest (the result store's).

A statement is one ``Cursor.execute`` or ``executemany`` (``Connection.execute`` goes
through it); the ``BEGIN`` and ``COMMIT`` psycopg sends around a transaction block are
not counted, for either side.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg


def _is_fleet(query: Any) -> bool:
    text = str(query)
    return "_fleet_" in text or text.startswith(("LISTEN ", "NOTIFY "))


class StatementCounter:
    """Install once per process, before any statement is sent."""

    def __init__(self) -> None:
        self.store = 0
        self.fleet = 0
        self._lock = threading.Lock()  # the store sends from threads of its own
        execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

        def counted_execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            self._count(query)
            return execute(cursor, query, *args, **kwargs)

        def counted_executemany(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            self._count(query)
            return executemany(cursor, query, *args, **kwargs)

        psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
        psycopg.Cursor.executemany = counted_executemany  # type: ignore[method-assign]

    def _count(self, query: Any) -> None:
        fleet = _is_fleet(query)
        with self._lock:
            if fleet:
                self.fleet += 1
            else:
                self.store += 1

    @property
    def total(self) -> int:
        return self.store + self.fleet
