"""Durable memory of function calls, so a runner never runs an effect twice.

Pick a store by where your runners live: :class:`MemoryResultStore` for tests,
:class:`SQLiteResultStore` for processes on one machine, :class:`PostgresResultStore` for a
fleet. :func:`open_store` chooses one from a path or URL.
"""

from __future__ import annotations

import os

from ._exceptions import (
    InvalidTransitionError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreKeyError,
    StoreSchemaError,
    StoreUnavailableError,
    UnknownCallError,
)
from ._memory import MemoryResultStore
from ._postgres import PostgresResultStore
from ._protocol import ResultStore
from ._records import (
    PRUNABLE_STATES,
    SETTLED_STATES,
    CallKey,
    CallRecord,
    CallState,
    Claim,
    Liveness,
    arguments_hash,
    idempotency_key_for,
    new_owner_id,
    owner_is_alive,
    owner_is_dead,
    process_liveness,
)
from ._sqlite import SQLiteResultStore

__all__ = [
    "DEFAULT_SQLITE_PATH",
    "PRUNABLE_STATES",
    "SETTLED_STATES",
    "CallKey",
    "CallRecord",
    "CallState",
    "Claim",
    "InvalidTransitionError",
    "Liveness",
    "MemoryResultStore",
    "PostgresResultStore",
    "ResultStore",
    "SQLiteResultStore",
    "StoreClosedError",
    "StoreCorruptError",
    "StoreError",
    "StoreKeyError",
    "StoreSchemaError",
    "StoreUnavailableError",
    "UnknownCallError",
    "arguments_hash",
    "idempotency_key_for",
    "new_owner_id",
    "open_store",
    "owner_is_alive",
    "owner_is_dead",
    "process_liveness",
]

#: Where :func:`open_store` keeps records when given no store (relative to the working
#: directory).
DEFAULT_SQLITE_PATH = "openagentcore-calls.db"

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def open_store(spec: ResultStore | str | os.PathLike[str] | None = None) -> ResultStore:
    """Turn what a user configured into a store.

    - a store: returned as is;
    - ``"postgresql://..."`` or ``"postgres://..."``: :class:`PostgresResultStore`;
    - any other string or path: :class:`SQLiteResultStore` on that file;
    - ``None``: :class:`SQLiteResultStore` on :data:`DEFAULT_SQLITE_PATH`. The default is
      durable on purpose: an in-memory default would forget started calls in a crash and
      run their effects again. Pass ``MemoryResultStore()`` explicitly in tests.
    """
    if spec is None:
        return SQLiteResultStore(DEFAULT_SQLITE_PATH)
    if isinstance(spec, str):
        if spec.lower().startswith(_POSTGRES_SCHEMES):
            return PostgresResultStore(spec)
        return SQLiteResultStore(spec)
    if isinstance(spec, os.PathLike):
        return SQLiteResultStore(spec)
    return spec
