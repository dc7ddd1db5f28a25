"""The fleet's directory: who is alive and who follows which Session, in SQL rows.

Two tables next to the result store's (``<table>_fleet_workers`` and
``<table>_fleet_sessions``), created by the directory on first use with
``CREATE TABLE IF NOT EXISTS``: they hold only coordination state, nothing a restart
must migrate, so they stay out of the store's versioned migrations. On PostgreSQL the
time is the database's (``clock_timestamp()``), so workers whose clocks disagree agree
on who lapsed; taking Sessions uses ``FOR UPDATE SKIP LOCKED``; ownership events are
sent with ``NOTIFY`` and waited for with ``LISTEN``. On SQLite (one host) the writes
serialize on the file's lock and workers poll.

Every write that changes a Session a worker holds names the epoch it holds it at, so a
worker whose Session was taken over cannot touch it any more (see
:mod:`._fleet_core`). Ownership only saves work: the call claims in the result store
stay the only gate for effects.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import os
import re
import socket
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..store import MemoryResultStore, PostgresResultStore, ResultStore, SQLiteResultStore
from ..store._postgres import _dead_peer_detection
from ._fleet_core import Plan, decide, formation_left

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "Directory",
    "FleetStatus",
    "PostgresDirectory",
    "SQLiteDirectory",
    "open_directory",
]

#: Seconds to connect, and the limit on each statement: a directory that cannot answer
#: within them is unreachable for this round.
_CONNECT_TIMEOUT = 5
_STATEMENT_TIMEOUT = "5s"

#: How long a worker woken by NOTIFY keeps draining notifications before its round.
_COALESCE = 0.02

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,39}")
DEFAULT_TABLE = "openagentcore_calls"


@dataclass(frozen=True, slots=True)
class Taken:
    session_id: str
    agent_id: str
    epoch: int


@dataclass(frozen=True, slots=True)
class FleetStatus:
    """The rows of one group, for ``openagentcore fleet status``."""

    now: float
    #: (worker id, seconds since its last heartbeat, Sessions it owns)
    workers: list[tuple[str, float, int]]
    #: (session id, agent id, state, owner, epoch)
    sessions: list[tuple[str, str, str, str | None, int]]


class Directory(abc.ABC):
    """The SQL both dialects share; subclasses open connections and run statements."""

    _p = "?"
    #: The directory's clock in Unix seconds, as an SQL expression.
    _now = "((julianday('now') - 2440587.5) * 86400.0)"

    def __init__(self, prefix: str, group: str) -> None:
        if not group or len(group) > 200:
            raise ValueError(f"group must be 1-200 characters, got {group!r}")
        self.group = group
        self._workers = f"{prefix}_fleet_workers"
        self._sessions = f"{prefix}_fleet_sessions"

    # -- what subclasses provide -------------------------------------------------------

    @abc.abstractmethod
    def _tx(self) -> AbstractContextManager[Any]:
        """A transaction: yields a DB-API cursor (``execute`` returns the cursor)."""

    @abc.abstractmethod
    def _notify(self, cursor: Any) -> None:
        """Tell the group's workers, at commit, that ownership changed."""

    @abc.abstractmethod
    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for an ownership event; True if one came."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the connections; a ``wait`` under way returns within its timeout."""

    @abc.abstractmethod
    def interrupt(self) -> None:
        """Make a statement stuck on a silent network fail now."""

    # -- schema ------------------------------------------------------------------------

    def _schema(self) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {self._workers} ("
            "group_name TEXT NOT NULL, worker_id TEXT NOT NULL, "
            "heartbeat DOUBLE PRECISION NOT NULL, joined DOUBLE PRECISION NOT NULL, "
            "PRIMARY KEY (group_name, worker_id))",
            f"CREATE TABLE IF NOT EXISTS {self._sessions} ("
            "group_name TEXT NOT NULL, session_id TEXT NOT NULL, agent_id TEXT NOT NULL, "
            "state TEXT NOT NULL, owner TEXT, epoch BIGINT NOT NULL DEFAULT 0, "
            "updated_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (group_name, session_id))",
        ]

    def _sql(self, text: str) -> str:
        return text.replace("%s", self._p)

    # -- workers -----------------------------------------------------------------------

    def heartbeat(self, worker_id: str, *, joining: bool = False) -> None:
        """Say the worker is alive, on the directory's clock. A worker ``joining``
        tells the others (NOTIFY), so they give back their excess at once instead of
        at their next round, up to seconds later, while it waits for its share."""
        with self._tx() as cur:
            cur.execute(
                self._sql(
                    f"INSERT INTO {self._workers} (group_name, worker_id, heartbeat, joined) "
                    f"VALUES (%s, %s, {self._now}, {self._now}) "
                    f"ON CONFLICT (group_name, worker_id) DO UPDATE SET heartbeat = {self._now}"
                ),
                (self.group, worker_id),
            )
            if joining:
                self._notify(cur)

    def leave(self, worker_id: str) -> int:
        """Give back every Session the worker owns and remove it: the others take them
        at once (NOTIFY) instead of after the TTL. Returns how many it gave back."""
        with self._tx() as cur:
            given = cur.execute(
                self._sql(
                    f"UPDATE {self._sessions} SET owner = NULL, updated_at = {self._now} "
                    "WHERE group_name = %s AND owner = %s"
                ),
                (self.group, worker_id),
            ).rowcount
            cur.execute(
                self._sql(f"DELETE FROM {self._workers} WHERE group_name = %s AND worker_id = %s"),
                (self.group, worker_id),
            )
            self._notify(cur)
        return int(given)

    # -- planning ----------------------------------------------------------------------

    def plan(
        self,
        worker_id: str,
        *,
        ttl: float,
        slack: int,
        max_sessions: int | None,
        settle: float = 0.0,
    ) -> tuple[Plan, dict[str, int]]:
        """The worker's plan (see :func:`._fleet_core.decide`) and the Sessions it owns
        now with their epochs (what it follows and nothing else). ``settle``: how long
        after its oldest live worker joined the group is still forming."""
        live_sql = self._live_workers_sql()
        with self._tx() as cur:
            counts = cur.execute(
                self._sql(
                    "SELECT count(*), "
                    f"coalesce(sum(CASE WHEN owner IS NULL OR owner NOT IN ({live_sql}) "
                    "THEN 1 ELSE 0 END), 0), "
                    f"(SELECT count(*) FROM ({live_sql}) AS live), "
                    f"(SELECT {self._now} - min(joined) FROM {self._workers} "
                    f"WHERE group_name = %s AND heartbeat > {self._now} - %s) "
                    f"FROM {self._sessions} WHERE group_name = %s AND state = 'active'"
                ),
                (self.group, ttl, self.group, ttl, self.group, ttl, self.group),
            ).fetchone()
            mine = cur.execute(
                self._sql(
                    f"SELECT session_id, epoch FROM {self._sessions} "
                    "WHERE group_name = %s AND owner = %s AND state = 'active'"
                ),
                (self.group, worker_id),
            ).fetchall()
        active, free, live = (int(value) for value in counts[:3])
        # No live worker at all (not even this one, whose heartbeat came first): the
        # TTL is shorter than a statement; a group that old has formed.
        group_age = settle if counts[3] is None else float(counts[3])
        held = [(str(session), int(epoch)) for session, epoch in mine]
        decided = decide(
            held,
            active=active,
            live=max(1, live),  # the worker heartbeats before it plans: it counts
            free=free,
            slack=slack,
            max_sessions=max_sessions,
            forming_for=formation_left(group_age, settle),
        )
        return decided, dict(held)

    def _live_workers_sql(self) -> str:
        return (
            f"SELECT worker_id FROM {self._workers} "
            f"WHERE group_name = %s AND heartbeat > {self._now} - %s"
        )

    def acquire(self, worker_id: str, count: int, *, ttl: float) -> list[Taken]:
        """Take up to ``count`` orphans (active, owner absent or lapsed), bumping their
        epochs; Sessions another worker is taking right now are skipped, not waited for."""
        if count <= 0:
            return []
        live_sql = self._live_workers_sql()
        orphan = f"state = 'active' AND (owner IS NULL OR owner NOT IN ({live_sql}))"
        # The orphans are picked once, in a materialized CTE: as a subquery of the
        # UPDATE, PostgreSQL planned a nested loop that ran it again for each candidate
        # row, so its LIMIT bounded nothing and a worker asked for its share took every
        # orphan. The picked rows stay locked (on SQLite the file does), so they are
        # still orphans when updated.
        with self._tx() as cur:
            rows = cur.execute(
                self._sql(
                    f"WITH picked AS{self._materialized} (SELECT session_id "
                    f"FROM {self._sessions} WHERE group_name = %s AND {orphan} "
                    f"ORDER BY updated_at, session_id LIMIT %s{self._skip_locked}) "
                    f"UPDATE {self._sessions} SET owner = %s, epoch = epoch + 1, "
                    f"updated_at = {self._now} WHERE group_name = %s "
                    "AND session_id IN (SELECT session_id FROM picked) "
                    "RETURNING session_id, agent_id, epoch"
                ),
                (self.group, self.group, ttl, count, worker_id, self.group),
            ).fetchall()
        return [Taken(str(s), str(a), int(e)) for s, a, e in rows]

    _skip_locked = ""
    _materialized = ""

    def release(self, worker_id: str, held: Iterable[tuple[str, int]]) -> int:
        """Give back Sessions the worker holds at these epochs (fenced: a Session taken
        since is left alone)."""
        return self._change_held(worker_id, held, "owner = NULL")

    def park(self, worker_id: str, session_id: str, epoch: int) -> bool:
        """Park an idle Session: no owner, no stream, until adopt or the sweep wakes it."""
        return (
            self._change_held(worker_id, [(session_id, epoch)], "state = 'parked', owner = NULL")
            == 1
        )

    def _change_held(self, worker_id: str, held: Iterable[tuple[str, int]], change: str) -> int:
        changed = 0
        pairs = list(held)
        if not pairs:
            return 0
        with self._tx() as cur:
            for session_id, epoch in pairs:
                changed += cur.execute(
                    self._sql(
                        f"UPDATE {self._sessions} SET {change}, updated_at = {self._now} "
                        "WHERE group_name = %s AND session_id = %s AND owner = %s AND epoch = %s"
                    ),
                    (self.group, session_id, worker_id, epoch),
                ).rowcount
            if changed:
                self._notify(cur)
        return changed

    # -- Sessions reaching the fleet ---------------------------------------------------

    def adopt(self, sessions: Sequence[tuple[str, str]], *, wake: bool = True) -> None:
        """Make these ``(session, agent)`` active (new ones added, parked ones woken
        with ``wake``); an owned active Session keeps its owner. Idempotent."""
        if not sessions:
            return
        with self._tx() as cur:
            cur.executemany(
                self._sql(
                    f"INSERT INTO {self._sessions} (group_name, session_id, agent_id, "
                    f"state, owner, epoch, updated_at) VALUES (%s, %s, %s, 'active', NULL, "
                    f"0, {self._now}) ON CONFLICT (group_name, session_id) DO NOTHING"
                ),
                [(self.group, session_id, agent_id) for session_id, agent_id in sessions],
            )
            changed = cur.rowcount
            if wake:
                # An UPDATE locks only the rows it changes (the parked ones); an upsert
                # locked every row it met until commit, and workers taking their share
                # meanwhile skipped them all (SKIP LOCKED).
                cur.executemany(
                    self._sql(
                        f"UPDATE {self._sessions} SET state = 'active', "
                        f"updated_at = {self._now} "
                        "WHERE group_name = %s AND session_id = %s AND state = 'parked'"
                    ),
                    [(self.group, session_id) for session_id, _ in sessions],
                )
                changed += cur.rowcount
            if changed:  # a sweep that finds nothing new wakes nobody
                self._notify(cur)

    def release_session(self, session_id: str) -> bool:
        """An operator's release: whoever owns the Session loses it (the epoch moves, so
        its owner is fenced) and the fleet gives it to a live worker."""
        with self._tx() as cur:
            changed = cur.execute(
                self._sql(
                    f"UPDATE {self._sessions} SET owner = NULL, epoch = epoch + 1, "
                    f"state = 'active', updated_at = {self._now} "
                    "WHERE group_name = %s AND session_id = %s"
                ),
                (self.group, session_id),
            ).rowcount
            self._notify(cur)
        return bool(changed)

    def status(self, *, ttl: float | None = None) -> FleetStatus:
        with self._tx() as cur:
            now = float(cur.execute(self._sql(f"SELECT {self._now}")).fetchone()[0])
            workers = cur.execute(
                self._sql(
                    f"SELECT w.worker_id, w.heartbeat, (SELECT count(*) FROM {self._sessions} s "
                    "WHERE s.group_name = w.group_name AND s.owner = w.worker_id) "
                    f"FROM {self._workers} w WHERE w.group_name = %s ORDER BY w.worker_id"
                ),
                (self.group,),
            ).fetchall()
            sessions = cur.execute(
                self._sql(
                    "SELECT session_id, agent_id, state, owner, epoch "
                    f"FROM {self._sessions} WHERE group_name = %s ORDER BY session_id"
                ),
                (self.group,),
            ).fetchall()
        return FleetStatus(
            now,
            [(str(w), now - float(h), int(n)) for w, h, n in workers],
            [(str(s), str(a), str(st), o, int(e)) for s, a, st, o, e in sessions],
        )


class PostgresDirectory(Directory):
    """The directory in PostgreSQL, for workers on many hosts."""

    _p = "%s"
    _now = "extract(epoch from clock_timestamp())::float8"
    _skip_locked = " FOR UPDATE SKIP LOCKED"
    _materialized = " MATERIALIZED"

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "public",
        table: str = DEFAULT_TABLE,
        group: str = "default",
    ) -> None:

        for field, name in (("schema", schema), ("table", table)):
            if not _NAME.fullmatch(name):
                raise ValueError(
                    f"{field} must be 1-40 lower-case letters, digits or underscores, got {name!r}"
                )
        super().__init__(f'"{schema}"."{table}', group)
        self._workers = f'"{schema}"."{table}_fleet_workers"'
        self._sessions = f'"{schema}"."{table}_fleet_sessions"'
        digest = hashlib.sha256(f"{schema}.{table}:{group}".encode()).hexdigest()[:16]
        self._channel = f"oac_fleet_{digest}"
        self._dsn = dsn
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._connection: psycopg.Connection[tuple[Any, ...]] = self._connect()
        self._listener: psycopg.Connection[tuple[Any, ...]] | None = None
        lock_id = int.from_bytes(
            hashlib.sha256(f"openagentcore.fleet:{schema}.{table}".encode()).digest()[:8],
            "big",
            signed=True,
        )
        with self._tx() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id,))
            if not cur.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)
            ).fetchall():
                cur.execute(f'CREATE SCHEMA "{schema}"')
            for statement in self._schema():
                cur.execute(statement)

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        """A connection that gives up on a database gone from the network within
        seconds, as the result store's do, so the loop notices and retries."""
        import psycopg

        conninfo = psycopg.conninfo.make_conninfo(
            self._dsn, connect_timeout=_CONNECT_TIMEOUT, **_dead_peer_detection(self._dsn)
        )
        connection = psycopg.connect(conninfo, autocommit=True, prepare_threshold=None)
        # A transaction left open by a worker cut off mid-way would keep its Sessions'
        # rows locked, and SKIP LOCKED would skip them: the server ends it.
        connection.execute(
            "SELECT set_config('statement_timeout', %s, false), "
            "set_config('lock_timeout', %s, false), "
            "set_config('idle_in_transaction_session_timeout', %s, false)",
            (_STATEMENT_TIMEOUT, _STATEMENT_TIMEOUT, _STATEMENT_TIMEOUT),
        )
        return connection

    def __repr__(self) -> str:
        return f"PostgresDirectory(group={self.group!r}, sessions={self._sessions})"

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        with self._lock:
            if self._connection.closed:
                self._connection = self._connect()
            with self._connection.transaction(), self._connection.cursor() as cur:
                yield cur

    def _notify(self, cursor: Any) -> None:
        # NOTIFY is delivered at commit, and identical ones in a transaction coalesce.
        cursor.execute(f"NOTIFY {self._channel}")

    def wait(self, timeout: float) -> bool:
        import psycopg

        if self._stopped.is_set():
            return False
        try:
            if self._listener is None or self._listener.closed:
                self._listener = self._connect()
                self._listener.execute(f"LISTEN {self._channel}")
            woken = any(True for _ in self._listener.notifies(timeout=timeout, stop_after=1))
            if woken:
                # A burst (many adopts, a worker leaving) is one round, not one each.
                for _ in self._listener.notifies(timeout=_COALESCE):
                    pass
            return woken
        except psycopg.Error:  # lost, or closed under it by close()/interrupt()
            listener, self._listener = self._listener, None
            if listener is not None:
                listener.close()
            self._stopped.wait(timeout)  # polling is the fallback
        return False

    def interrupt(self) -> None:
        """Shut the connections' sockets down: a thread waiting on a database gone
        silent (a network cut acknowledges nothing and says nothing, for as long as TCP
        keeps the connection) fails at once, releasing the directory, and the next
        statement reconnects."""
        import psycopg

        for connection in (self._connection, self._listener):
            if connection is None or connection.closed:
                continue
            with contextlib.suppress(psycopg.Error, OSError):
                descriptor = os.dup(connection.pgconn.socket)
                with socket.socket(fileno=descriptor) as stuck:
                    stuck.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stopped.set()
        with self._lock:
            self._connection.close()
        if self._listener is not None:
            self._listener.close()


class SQLiteDirectory(Directory):
    """The directory in an SQLite file, for worker processes on one host (they poll)."""

    def __init__(
        self, path: str | Path, *, table: str = DEFAULT_TABLE, group: str = "default"
    ) -> None:
        if not _NAME.fullmatch(table):
            raise ValueError(
                f"table must be 1-40 lower-case letters, digits or underscores, got {table!r}"
            )
        super().__init__(f'"{table}', group)
        self._workers = f'"{table}_fleet_workers"'
        self._sessions = f'"{table}_fleet_sessions"'
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._connection = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=30.0
        )
        self._connection.execute("PRAGMA journal_mode=WAL")
        with self._tx() as cur:
            for statement in self._schema():
                cur.execute(statement)

    def __repr__(self) -> str:
        return f"SQLiteDirectory(group={self.group!r}, sessions={self._sessions})"

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        with self._lock:
            cur = self._connection.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")

    def _notify(self, cursor: Any) -> None:
        """Nothing: SQLite has no NOTIFY; the workers poll."""

    def wait(self, timeout: float) -> bool:
        self._stopped.wait(timeout)
        return False

    def interrupt(self) -> None:
        """Nothing: a local file does not go silent (a lock wait ends at its timeout)."""

    def close(self) -> None:
        self._stopped.set()
        with self._lock:
            self._connection.close()


def open_directory(
    store: ResultStore | str,
    *,
    group: str = "default",
    schema: str = "public",
    table: str = DEFAULT_TABLE,
) -> Directory:
    """The directory next to ``store``'s records: its PostgreSQL database (schema and
    table prefix), its SQLite file, or a private one for a memory store (one process).
    A string is a PostgreSQL DSN (``postgresql://...``; ``schema`` and ``table`` name
    the store's table) or an SQLite path."""
    if isinstance(store, str):
        if store.lower().startswith(("postgresql://", "postgres://")):
            return PostgresDirectory(store, schema=schema, table=table, group=group)
        return SQLiteDirectory(store, table=table, group=group)
    if isinstance(store, PostgresResultStore):
        return PostgresDirectory(
            store._dsn, schema=store._schema, table=store._table_name, group=group
        )
    if isinstance(store, SQLiteResultStore):
        return SQLiteDirectory(store.path, group=group)
    if isinstance(store, MemoryResultStore):
        return SQLiteDirectory(":memory:", group=group)
    raise TypeError(
        f"serve_agent needs a PostgresResultStore or SQLiteResultStore shared by the "
        f"workers, got {type(store).__name__}; pass directory= to use another"
    )
