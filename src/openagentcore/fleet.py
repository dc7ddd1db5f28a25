"""The fleet of workers that serve an Agent's Sessions together, seen from outside a
runner: hand a Session to the fleet from a web application, read or change who
follows what. Workers run :meth:`AsyncFunctionRunner.serve_agent
<openagentcore.AsyncFunctionRunner.serve_agent>` (or ``openagentcore worker``)."""

from __future__ import annotations

from .runner._fleet import FleetReport
from .runner._fleet_directory import (
    DEFAULT_TABLE,
    Directory,
    FleetStatus,
    PostgresDirectory,
    SQLiteDirectory,
    open_directory,
)
from .store import ResultStore

__all__ = [
    "Directory",
    "FleetReport",
    "FleetStatus",
    "PostgresDirectory",
    "SQLiteDirectory",
    "adopt",
    "release",
    "status",
]


def adopt(
    store_or_dsn: ResultStore | str,
    session_id: str,
    *,
    agent_id: str,
    group: str = "default",
    schema: str = "public",
    table: str = DEFAULT_TABLE,
) -> None:
    """Hand ``session_id`` (a Session of ``agent_id``) to the fleet of ``group`` now, so
    a worker follows it at once instead of at its next discovery; wakes it if parked.
    Idempotent. ``store_or_dsn`` is the workers' result store, or a ``postgresql://``
    DSN (with the ``schema`` and ``table`` of their store) or the SQLite path."""
    directory = open_directory(store_or_dsn, group=group, schema=schema, table=table)
    try:
        directory.adopt([(session_id, agent_id)])
    finally:
        directory.close()


def release(store_or_dsn: ResultStore | str, session_id: str, *, group: str = "default") -> bool:
    """Take ``session_id`` from its owner (fenced: its epoch moves) so a live worker
    takes it; False if the fleet does not know it."""
    directory = open_directory(store_or_dsn, group=group)
    try:
        return directory.release_session(session_id)
    finally:
        directory.close()


def status(store_or_dsn: ResultStore | str, *, group: str = "default") -> FleetStatus:
    """The group's workers (seconds since their heartbeat, Sessions owned) and Sessions
    (state, owner, epoch)."""
    directory = open_directory(store_or_dsn, group=group)
    try:
        return directory.status()
    finally:
        directory.close()
