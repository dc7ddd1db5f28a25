"""The part of the SQLite and PostgreSQL stores that is the same SQL on both."""

from __future__ import annotations

import abc
import contextlib
import functools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from . import _rules
from ._base import Clock, StoreBase, normalize_find_filters, validate_older_than
from ._exceptions import StoreCorruptError, UnknownCallError
from ._records import (
    PRUNABLE_STATES,
    CallKey,
    CallRecord,
    CallState,
    Claim,
    Liveness,
    process_liveness,
)

if TYPE_CHECKING:
    from ._group import GroupCommit

__all__ = ["MIGRATIONS", "Migration", "SQLResultStore", "Transaction"]

T = TypeVar("T")


class Transaction(Protocol):
    """What the shared SQL needs from a database connection inside one transaction."""

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]: ...

    def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        """Run a statement that returns no rows; returns how many rows it changed."""
        ...


@dataclass(frozen=True)
class Migration:
    """One schema version. Statements name the table ``{table}`` (quoted and qualified
    as the store uses it), its bare name ``{name}``, and prefix index and constraint
    names with ``{prefix}``. Append new versions; never edit old ones."""

    version: int
    description: str
    #: Run on every database.
    statements: tuple[str, ...] = ()
    #: Run after ``statements`` on one dialect only (``"sqlite"`` or ``"postgres"``).
    by_dialect: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def statements_for(self, dialect: str) -> tuple[str, ...]:
        return self.statements + tuple(self.by_dialect.get(dialect, ()))


def _states_sql(*states: str) -> str:
    return ", ".join(f"'{state}'" for state in states)


# Each version spells out its states: a later CallState must not change what an old
# migration created.
_V1_STATES = _states_sql("started", "completed", "submitted", "applied", "in_doubt", "abandoned")
_V2_STATES = _states_sql(
    "started", "completed", "submitted", "applied", "in_doubt", "abandoned", "rejected"
)


def _create_table(table: str, states: str) -> str:
    return f"""CREATE TABLE IF NOT EXISTS {table} (
                session_id TEXT NOT NULL,
                turn_id TEXT NOT NULL,
                call_id TEXT NOT NULL,
                function_name TEXT NOT NULL,
                arguments_hash TEXT NOT NULL,
                state TEXT NOT NULL CHECK (state IN ({states})),
                result TEXT,
                idempotency_key TEXT NOT NULL,
                attempts INTEGER NOT NULL CHECK (attempts >= 1),
                owner TEXT,
                lease_expires_at DOUBLE PRECISION,
                created_at DOUBLE PRECISION NOT NULL,
                updated_at DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (session_id, turn_id, call_id)
            )"""


# Serves find(states=...) and prune(); lookups by session use the primary key.
_STATE_INDEX = "CREATE INDEX IF NOT EXISTS {prefix}state_updated_idx ON {table} (state, updated_at)"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "create the calls table and its state index",
        (_create_table("{table}", _V1_STATES), _STATE_INDEX),
    ),
    Migration(
        2,
        "allow the state 'rejected'",
        by_dialect={
            # SQLite cannot alter a CHECK constraint: copy the rows into a new table (the
            # migration runs in one transaction, so a failure leaves the old table).
            "sqlite": (
                _create_table("{table}_v2", _V2_STATES),
                "INSERT INTO {table}_v2 SELECT * FROM {table}",
                "DROP TABLE {table}",
                "ALTER TABLE {table}_v2 RENAME TO {name}",
                _STATE_INDEX,
            ),
            # The column's CHECK got PostgreSQL's default name, <table>_state_check.
            "postgres": (
                "ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {prefix}state_check",
                f"ALTER TABLE {{table}} ADD CONSTRAINT {{prefix}}state_check "
                f"CHECK (state IN ({_V2_STATES}))",
            ),
        },
    ),
    Migration(
        3,
        "remember when a call was found in doubt and how it was settled",
        by_dialect={
            dialect: (
                "ALTER TABLE {table} ADD COLUMN in_doubt_at DOUBLE PRECISION",
                "ALTER TABLE {table} ADD COLUMN settled_by TEXT",
            )
            for dialect in ("sqlite", "postgres")
        },
    ),
    Migration(
        4,
        "keep what a function produced after its timeout",
        (
            "ALTER TABLE {table} ADD COLUMN late_outcome TEXT",
            "ALTER TABLE {table} ADD COLUMN late_at DOUBLE PRECISION",
        ),
    ),
    Migration(
        5,
        "keep each decision a person took on a call",
        ("ALTER TABLE {table} ADD COLUMN history TEXT",),
    ),
)

_KEY_MATCH = "session_id = ? AND turn_id = ? AND call_id = ?"
#: The most keys one statement of ``get_many`` reads: three parameters each, within
#: the 999 that SQLite builds before 3.32 take.
GET_MANY_CHUNK = 250
_ORDER = "ORDER BY created_at, session_id, turn_id, call_id"


def _mark_to(state: CallState, current: CallRecord, now: float) -> CallRecord | None:
    return _rules.mark(current, state, now=now)


def _key_params(key: CallKey) -> tuple[str, str, str]:
    return (key.session_id, key.turn_id, key.call_id)


class SQLResultStore(StoreBase):
    """Implements the store protocol in SQL that SQLite and PostgreSQL both accept.

    Subclasses open connections and run transactions; this class decides what to write.
    Every change reads the row and writes it back in one transaction that locks the row
    (``BEGIN IMMEDIATE`` in SQLite, ``SELECT ... FOR UPDATE`` in PostgreSQL), so the
    state rules in :mod:`._rules` see the latest row. The time those rules use is read in
    the same statement as the row: from ``now_sql`` (the database's clock) when given,
    else from ``clock``.
    """

    #: Appended to the row read that precedes an update.
    _row_lock_clause: ClassVar[str] = ""
    #: Runs the changes of several callers in one transaction (group commit), where the
    #: store sets one up; else each change commits alone.
    _group: GroupCommit | None = None
    #: The driver's parameter marker.
    _placeholder: ClassVar[str] = "?"
    #: Which of a migration's per-dialect statements apply.
    _dialect: ClassVar[str]

    def __init__(
        self,
        *,
        table: str,
        clock: Clock = time.time,
        now_sql: str | None = None,
        liveness: Liveness = process_liveness,
    ) -> None:
        super().__init__(clock=clock, liveness=liveness)
        self._table = table
        self._now_sql = now_sql
        # Where the time goes in a statement: the database's clock, or a parameter.
        now = "?" if now_sql is None else now_sql
        columns = ", ".join(_rules.COLUMNS)
        claimed = ", ".join(_rules.CLAIM_COLUMNS)
        # All but the three times, which come from ``now``.
        values = ", ".join("?" for _ in _rules.CLAIM_COLUMNS[:-3])
        self._select = f"SELECT {columns} FROM {table}"
        # The WHERE clause tells SQLite that ON CONFLICT belongs to the INSERT.
        self._insert_sql = self._sql(
            f"INSERT INTO {table} ({claimed}) SELECT {values}, n.t + ?, n.t, n.t "
            f"FROM (SELECT {now} AS t) AS n WHERE true "
            f"ON CONFLICT (session_id, turn_id, call_id) DO NOTHING RETURNING {columns}"
        )
        self._get_sql = self._sql(f"{self._select} WHERE {_KEY_MATCH}")
        #: The full-chunk statement of ``get_many``, built once.
        self._get_many_sql_by_count: dict[int, str] = {}
        self._get_with_now_sql = self._sql(
            f"SELECT {columns}, {now} FROM {table} WHERE {_KEY_MATCH}"
        )
        self._get_for_update_sql = self._get_with_now_sql + self._row_lock_clause
        self._now_only_sql = self._sql(f"SELECT {now}")
        # COALESCE keeps the first saved result (and late outcome) even if a caller's
        # rules were wrong.
        self._update_sql = self._sql(
            f"UPDATE {table} SET state = ?, attempts = ?, owner = ?, lease_expires_at = ?, "
            f"updated_at = ?, in_doubt_at = ?, settled_by = ?, result = COALESCE(result, ?), "
            f"late_outcome = COALESCE(late_outcome, ?), late_at = ?, history = ? "
            f"WHERE {_KEY_MATCH}"
        )
        self._delete_sql = self._sql(f"DELETE FROM {table} WHERE {_KEY_MATCH}")
        prunable = ", ".join("?" for _ in PRUNABLE_STATES)
        self._prune_sql = self._sql(
            f"DELETE FROM {table} WHERE state IN ({prunable}) AND updated_at < {now} - ?"
        )

    @abc.abstractmethod
    def _transaction(self) -> AbstractContextManager[Transaction]:
        """A write transaction, committed when the block ends without an error."""

    @abc.abstractmethod
    def _reading(self) -> AbstractContextManager[Transaction]:
        """A connection for a single read."""

    def _write(
        self,
        work: Callable[[Transaction], T],
        *,
        synced: bool = True,
        order: tuple[str, ...] | None = None,
    ) -> T:
        """Run ``work`` in a write transaction and commit it; returns what ``work`` returns.

        ``synced=False`` says the change is bookkeeping (a progress mark): the store may
        commit it without waiting for the disk. ``order`` is the key of the first row the
        change locks, so that changes sharing a transaction lock rows in one order. Every
        change goes through here, so a store can run several callers' work in one
        transaction (group commit): a store that sets ``_group`` does.
        """
        if self._group is not None:
            return self._group.run(work, synced=synced, order=order)
        with self._transaction() as tx:
            return work(tx)

    def _sql(self, text: str) -> str:
        return text.replace("?", self._placeholder)

    def _now_params(self) -> tuple[float, ...]:
        """The parameter a ``now`` in a statement takes: none on the database's clock."""
        return (self._clock(),) if self._now_sql is None else ()

    def is_stale(self, record: CallRecord, *, now: float | None = None) -> bool:
        if now is None and self._now_sql is not None:
            with self._reading() as tx:
                now = float(tx.query(self._now_only_sql)[0][0])
        return super().is_stale(record, now=now)

    def claim(
        self,
        key: CallKey,
        *,
        function_name: str,
        arguments_hash: str,
        owner: str,
        lease_seconds: float,
    ) -> Claim:
        # The times are placeholders: the insert takes them from ``now``.
        record = _rules.started_record(
            key,
            function_name=function_name,
            arguments_hash=arguments_hash,
            owner=owner,
            lease_seconds=lease_seconds,
            now=0.0,
        )
        row = _rules.record_to_row(record, None)[: len(_rules.CLAIM_COLUMNS) - 3]

        def insert(tx: Transaction) -> Claim:
            while True:
                inserted = tx.query(self._insert_sql, (*row, lease_seconds, *self._now_params()))
                if inserted:
                    return Claim(won=True, record=_rules.record_from_row(inserted[0]))
                # ON CONFLICT waited for the other inserter to commit, so its row is visible
                # now, unless prune() deleted it in between; then the insert can succeed.
                existing = tx.query(
                    self._get_with_now_sql, (*self._now_params(), *_key_params(key))
                )
                if existing:
                    found = _rules.record_from_row(existing[0])
                    now = float(existing[0][-1])
                    stale = _rules.is_stale(found, now=now, liveness=self._liveness)
                    return Claim(won=False, record=found, stale=stale)

        return self._write(insert, order=_key_params(key))

    @abc.abstractmethod
    def _damaged(self, exc: Exception) -> StoreCorruptError:
        """The error for a row that cannot be decoded, naming where the records live."""

    @contextmanager
    def _naming_damage(self) -> Iterator[None]:
        """Rows are decoded after their read transaction; a bad one names the store."""
        try:
            yield
        except _rules.DamagedRowError as exc:
            raise self._damaged(exc) from exc

    def get(self, key: CallKey) -> CallRecord | None:
        """The call's record, or ``None``; a damaged row raises ``StoreCorruptError``."""
        with self._reading() as tx:
            rows = tx.query(self._get_sql, _key_params(key))
        with self._naming_damage():
            return _rules.record_from_row(rows[0]) if rows else None

    def get_many(self, keys: Iterable[CallKey]) -> dict[CallKey, CallRecord]:
        """The records of ``keys``, ``GET_MANY_CHUNK`` keys to a statement (each a read
        of its own, so a long lookup never holds the connection long); a damaged row
        raises ``StoreCorruptError``."""
        wanted = list(dict.fromkeys(keys))
        rows: list[tuple[Any, ...]] = []
        for start in range(0, len(wanted), GET_MANY_CHUNK):
            chunk = wanted[start : start + GET_MANY_CHUNK]
            params = [part for key in chunk for part in _key_params(key)]
            with self._reading() as tx:
                rows.extend(tx.query(self._get_many_sql(len(chunk)), params))
        with self._naming_damage():
            records = [_rules.record_from_row(row) for row in rows]
        return {record.key: record for record in records}

    def _get_many_sql(self, count: int) -> str:
        """The read of ``count`` keys: the keys as a table of values, matched through
        the table's key index (SQLite's primary key, PostgreSQL's hash index on
        ``call_id``; a plain ``IN (VALUES ...)`` made SQLite scan the table)."""
        sql = self._get_many_sql_by_count.get(count)
        if sql is None:
            values = ", ".join("(?, ?, ?)" for _ in range(count))
            sql = self._sql(
                f"WITH wanted (session_id, turn_id, call_id) AS (VALUES {values}) "
                f"{self._select} WHERE (session_id, turn_id, call_id) IN "
                "(SELECT session_id, turn_id, call_id FROM wanted)"
            )
            if count == GET_MANY_CHUNK:
                self._get_many_sql_by_count[count] = sql
        return sql

    def find(
        self,
        *,
        session_id: str | None = None,
        states: Iterable[CallState] | None = None,
        limit: int | None = None,
    ) -> list[CallRecord]:
        """Records matching the filters, oldest first; a damaged row raises
        ``StoreCorruptError``."""
        wanted, limit = normalize_find_filters(states, limit)
        if wanted is not None and not wanted:
            return []
        conditions: list[str] = []
        params: list[object] = []
        if session_id is not None:
            conditions.append("session_id = ?")
            params.append(session_id)
        if wanted is not None:
            values = sorted(state.value for state in wanted)
            conditions.append(f"state IN ({', '.join('?' for _ in values)})")
            params.extend(values)
        sql = self._select
        if conditions:
            sql += " WHERE " + " AND ".join(conditions)
        sql += f" {_ORDER}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        with self._reading() as tx:
            rows = tx.query(self._sql(sql), params)
        with self._naming_damage():
            return [_rules.record_from_row(row) for row in rows]

    def prune(self, *, older_than: float) -> int:
        validate_older_than(older_than)
        prunable = sorted(state.value for state in PRUNABLE_STATES)
        params = [*prunable, *self._now_params(), older_than]
        return self._write(lambda tx: tx.execute(self._prune_sql, params))

    def mark(self, key: CallKey, state: CallState) -> None:
        self._write(
            lambda tx: self._update_in(tx, key, functools.partial(_mark_to, state)),
            synced=False,
            order=_key_params(key),
        )

    def mark_many(self, changes: Iterable[tuple[CallKey, CallState]]) -> None:
        # Sorted, so two workers marking overlapping calls lock rows in the same order.
        ordered = sorted(changes, key=lambda change: _key_params(change[0]))
        if not ordered:
            return

        def mark_all(tx: Transaction) -> None:
            for key, state in ordered:
                with contextlib.suppress(UnknownCallError):
                    self._update_in(tx, key, functools.partial(_mark_to, state))

        self._write(mark_all, synced=False, order=_key_params(ordered[0][0]))

    def _update(
        self,
        key: CallKey,
        decide: Callable[[CallRecord, float], _rules.Decision],
        *,
        result_text: str | None = None,
        late_outcome_text: str | None = None,
    ) -> tuple[CallRecord, bool]:
        return self._write(
            lambda tx: self._update_in(tx, key, decide, result_text, late_outcome_text),
            order=_key_params(key),
        )

    def _update_in(
        self,
        tx: Transaction,
        key: CallKey,
        decide: Callable[[CallRecord, float], _rules.Decision],
        result_text: str | None = None,
        late_outcome_text: str | None = None,
    ) -> tuple[CallRecord, bool]:
        """Read the row and the time under a lock, let ``decide`` compute its next
        version, write it."""
        rows = tx.query(self._get_for_update_sql, (*self._now_params(), *_key_params(key)))
        if not rows:
            raise UnknownCallError(f"no record of {key!r}; claim the call first")
        current = _rules.record_from_row(rows[0])
        updated = decide(current, float(rows[0][-1]))
        if updated is None:
            return current, False
        if isinstance(updated, _rules.Delete):
            tx.execute(self._delete_sql, _key_params(key))
            return current, True
        tx.execute(
            self._update_sql,
            (
                updated.state.value,
                updated.attempts,
                updated.owner,
                updated.lease_expires_at,
                updated.updated_at,
                updated.in_doubt_at,
                updated.settled_by,
                result_text,
                late_outcome_text,
                updated.late_at,
                _rules.encode_history(updated.history),
                *_key_params(key),
            ),
        )
        return updated, True
