"""A result store in PostgreSQL, shared by runners on many hosts."""

from __future__ import annotations

import hashlib
import re
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from . import _rules
from ._base import Clock
from ._exceptions import (
    StoreClosedError,
    StoreCorruptError,
    StoreKeyError,
    StoreSchemaError,
    StoreUnavailableError,
)
from ._group import GroupCommit, PendingWrite
from ._records import CallKey, Claim, Liveness, process_liveness
from ._rules import DamagedRowError
from ._sql import MIGRATIONS, SQLResultStore, Transaction

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["PostgresResultStore"]

T = TypeVar("T")

#: The most callers' changes one group commit takes.
_GROUP_LIMIT = 64

# Lower case only, so the quoted names below equal what psql users type unquoted, and
# short enough that the derived index and migrations table names fit in 63 bytes.
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,39}")

#: A fixed-size digest of a call's key. A btree entry holds at most about 2.7 KB, so a
#: primary key on the raw ids refuses the long ids a model can produce; uniqueness is
#: enforced on this digest instead (length prefixes keep the concatenation
#: unambiguous; md5 because index expressions must be immutable, and PostgreSQL's
#: sha256 needs a bytea conversion that is not), and lookups use hash indexes, which
#: have no size limit. A digest collision would need ids crafted by whoever already
#: controls the calls, the server.
_KEY_DIGEST = (
    "md5(length(session_id)::text || ':' || session_id || ':' || "
    "length(turn_id)::text || ':' || turn_id || ':' || call_id)"
)
_RAW_KEY_CONFLICT = "ON CONFLICT (session_id, turn_id, call_id)"


#: The database server's time in Unix seconds; ``clock_timestamp()`` moves within a
#: transaction, unlike ``now()``. In ``SELECT ... FOR UPDATE`` it is read with the row,
#: before any wait for the row's lock, so it can be up to ``lock_timeout`` early: staleness
#: is then judged late (the safe side) and a renewed lease is that much shorter, which a
#: ``lock_timeout`` far below the lease keeps harmless.
_DATABASE_NOW = "extract(epoch from clock_timestamp())::float8"


#: How long a transaction its worker left stays open before a store has been asked for
#: any lease: a third of the runner's default lease (60 s).
_DEFAULT_IDLE_IN_TRANSACTION = 20.0
#: The least idle time that ends a transaction: a live worker can pause that long between
#: two statements of one on a busy host, and would then lose the transaction.
_SHORTEST_IDLE_IN_TRANSACTION = 1.0

#: libpq connection parameters that notice a database gone from the network, unless the
#: DSN sets them: a probe after 5 s of silence, every 2 s, 3 unanswered ones end the
#: connection; so does data unacknowledged for 10 s while a statement is sent.
_DEAD_PEER_DETECTION = {
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
}
_TCP_USER_TIMEOUT_MS = "10000"


def _dead_peer_detection(dsn: str) -> dict[str, str]:
    """The dead-peer parameters the DSN leaves unset (none for a DSN psycopg cannot
    parse: connecting reports that)."""
    import psycopg

    try:
        given = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return {}
    wanted = dict(_DEAD_PEER_DETECTION)
    if psycopg.pq.version() >= 120000:  # libpq knows tcp_user_timeout since 12
        wanted["tcp_user_timeout"] = _TCP_USER_TIMEOUT_MS
    return {name: value for name, value in wanted.items() if name not in given}


def _without_password(dsn: str) -> str:
    import psycopg.conninfo

    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "PostgreSQL (unparsable DSN)"
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{parts.get('host', '')}{port}/{parts.get('dbname', '')}"


def _milliseconds(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


class _PostgresTransaction:
    def __init__(self, connection: psycopg.Connection[tuple[Any, ...]]) -> None:
        self._connection = connection

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        return self._connection.execute(sql, params).fetchall()

    def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        return self._connection.execute(sql, params).rowcount


class PostgresResultStore(SQLResultStore):
    """Records in a PostgreSQL table, for a fleet of runners on several hosts.

    Claims are one ``INSERT ... ON CONFLICT DO NOTHING RETURNING``, so exactly one runner
    wins; every other change locks its row with ``SELECT ... FOR UPDATE``. The store
    creates its schema, table and index on first use and records applied migrations in
    ``<table>_migrations``; concurrent starts serialize on a transaction-scoped advisory
    lock. Connections come from a ``psycopg_pool.ConnectionPool`` of at most
    ``pool_size`` connections; waiting longer than ``pool_timeout`` seconds for one, or
    losing the server, raises :class:`StoreUnavailableError`.

    Leases, staleness and ``updated_at`` use the database server's clock
    (``clock_timestamp()``), read in the same statement that reads the row, so workers
    whose clocks disagree still agree on when a lease expires. Pass ``clock`` only to
    control time in tests.

    Every connection runs at READ COMMITTED: each change locks its row (``FOR UPDATE`` or
    the insert's conflict check) before deciding, so it always decides on the latest
    committed row and a stronger level would only add serialization failures. A statement
    that waits longer than ``lock_timeout`` seconds for a lock, or runs longer than
    ``statement_timeout`` seconds, fails with :class:`StoreUnavailableError` (retry it),
    so one stuck transaction cannot stall lease renewal past the lease.

    A worker cut off from the database in the middle of a transaction leaves it open on
    the server, with its row locks, until TCP gives up (minutes to hours). So a
    transaction left idle for ``idle_in_transaction_timeout`` seconds is ended by the
    server (``idle_in_transaction_session_timeout``) and its locks freed. By default that
    is a third of the shortest lease this store has been asked for by ``claim``,
    ``take_over`` or ``renew_lease`` (at least 1 s; 20 s before the first). Connections
    also use TCP keepalives and ``tcp_user_timeout``, so a worker notices a database gone
    from the network within about 10 s; parameters of those the DSN sets are kept.
    Requires ``pip install 'openagentcore[postgres]'``.
    """

    _row_lock_clause = " FOR UPDATE"
    _placeholder = "%s"
    _dialect = "postgres"

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "public",
        table: str = "openagentcore_calls",
        pool_size: int = 4,
        pool_timeout: float = 30.0,
        lock_timeout: float = 5.0,
        statement_timeout: float = 30.0,
        idle_in_transaction_timeout: float | None = None,
        clock: Clock | None = None,
        liveness: Liveness = process_liveness,
    ) -> None:
        try:
            import psycopg
            import psycopg_pool
        except ImportError as exc:
            raise ImportError(
                "PostgresResultStore needs psycopg 3 and psycopg-pool; install them with "
                "pip install 'openagentcore[postgres]'"
            ) from exc
        for field, name in (("schema", schema), ("table", table)):
            if not _NAME.fullmatch(name):
                raise ValueError(
                    f"{field} must be 1-40 lower-case letters, digits or underscores, "
                    f"not starting with a digit; got {name!r}"
                )
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, got {pool_size!r}")
        timeouts = [("lock_timeout", lock_timeout), ("statement_timeout", statement_timeout)]
        if idle_in_transaction_timeout is not None:
            timeouts.append(("idle_in_transaction_timeout", idle_in_transaction_timeout))
        for field, seconds in timeouts:
            if not seconds > 0:
                raise ValueError(f"{field} must be a positive number of seconds, got {seconds!r}")
        super().__init__(
            table=f'"{schema}"."{table}"',
            clock=time.time if clock is None else clock,
            now_sql=_DATABASE_NOW if clock is None else None,
            liveness=liveness,
        )
        if _RAW_KEY_CONFLICT not in self._insert_sql:
            raise AssertionError("the claim INSERT no longer names the key; update _KEY_DIGEST")
        self._insert_sql = self._insert_sql.replace(
            _RAW_KEY_CONFLICT, f"ON CONFLICT (({_KEY_DIGEST}))"
        )
        settings = {
            "lock_timeout": _milliseconds(lock_timeout),
            "statement_timeout": _milliseconds(statement_timeout),
        }
        #: Whether ``idle_in_transaction_timeout`` follows the leases asked for.
        self._idle_follows_leases = idle_in_transaction_timeout is None
        self._idle_in_transaction = (
            _DEFAULT_IDLE_IN_TRANSACTION
            if idle_in_transaction_timeout is None
            else idle_in_transaction_timeout
        )
        self._idle_lock = threading.Lock()
        #: The idle-in-transaction timeout each open connection has, as set on it.
        self._idle_set_on: weakref.WeakKeyDictionary[psycopg.Connection[tuple[Any, ...]], str] = (
            weakref.WeakKeyDictionary()
        )

        def configure(connection: psycopg.Connection[tuple[Any, ...]]) -> None:
            connection.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
            self._bound_idle_transactions(connection, also=settings)

        #: As many commits at once as the pool has connections; changes made meanwhile
        #: wait for one of them to end and share the next transaction.
        self._group = GroupCommit(
            self._commit_batch,
            slots=pool_size,
            limit=_GROUP_LIMIT,
            interrupted=self._interrupted,
        )
        self._schema = schema
        self._table_name = table
        #: For the fleet's directory, which opens its own connections to this database.
        self._dsn = dsn
        #: Where the records live, for log lines: the DSN without its password.
        self.location = f"{_without_password(dsn)} table {schema}.{table}"
        # The server cannot do it now: down, restarting, or a read-only standby during a
        # failover. Transient, so "unavailable": the call waits instead of failing.
        self._unavailable_errors: tuple[type[Exception], ...] = (
            psycopg.OperationalError,
            psycopg.errors.ReadOnlySqlTransaction,
            psycopg.errors.IdleInTransactionSessionTimeout,
        )
        # Errors about the values, not the server: permanent, so never "unavailable".
        self._value_errors: tuple[type[Exception], ...] = (
            psycopg.DataError,
            psycopg.errors.ProgramLimitExceeded,
        )
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[tuple[Any, ...]]] | None = (
            psycopg_pool.ConnectionPool(
                dsn,
                min_size=1,
                max_size=pool_size,
                timeout=pool_timeout,
                # No server-side prepared statements: a plan cached before the table
                # changed under it fails ("cached plan must not change result type")
                # for the life of the connection; and PgBouncer cannot keep them.
                kwargs={
                    "autocommit": True,
                    "prepare_threshold": None,
                    **_dead_peer_detection(dsn),
                },
                configure=configure,
                check=psycopg_pool.ConnectionPool.check_connection,
                name=f"openagentcore-store-{schema}.{table}",
                open=False,
            )
        )
        try:
            try:
                self._pool.open(wait=True, timeout=pool_timeout)
            except psycopg_pool.PoolTimeout as exc:
                raise StoreUnavailableError(
                    f"could not connect to PostgreSQL within {pool_timeout} s; check that "
                    "the server is up and the DSN's host, port, user and database are right"
                ) from exc
            self._migrate()
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        # The DSN may hold a password, so it is never shown.
        return f"PostgresResultStore(schema={self._schema!r}, table={self._table_name!r})"

    def claim(
        self,
        key: CallKey,
        *,
        function_name: str,
        arguments_hash: str,
        owner: str,
        lease_seconds: float,
    ) -> Claim:
        self._follow_lease(lease_seconds)
        return super().claim(
            key,
            function_name=function_name,
            arguments_hash=arguments_hash,
            owner=owner,
            lease_seconds=lease_seconds,
        )

    def take_over(
        self, key: CallKey, *, owner: str, lease_seconds: float, expected_attempts: int
    ) -> Claim:
        self._follow_lease(lease_seconds)
        return super().take_over(
            key, owner=owner, lease_seconds=lease_seconds, expected_attempts=expected_attempts
        )

    def renew_lease(self, key: CallKey, *, owner: str, lease_seconds: float) -> bool:
        self._follow_lease(lease_seconds)
        return super().renew_lease(key, owner=owner, lease_seconds=lease_seconds)

    def _interrupted(self) -> Exception:
        return StoreUnavailableError(
            f"a change to {self.location} was interrupted before it was committed; retry it"
        )

    def _commit_batch(self, batch: list[PendingWrite[Any]]) -> None:
        """Run the changes in one transaction, rows locked in key order so that two
        workers' shared transactions cannot deadlock. A change that fails (a statement's
        error aborts the whole transaction in PostgreSQL) rolls the transaction back,
        and each change is then committed alone, so every caller gets what its own
        transaction would give it; a failed commit fails them all."""
        if len(batch) == 1:
            with self._transaction() as tx:
                batch[0].result = batch[0].work(tx)
            return
        ordered = sorted(batch, key=lambda p: (p.order is None, p.order or ()))
        try:
            with self._transaction() as tx:
                for pending in ordered:
                    try:
                        pending.result = pending.work(tx)
                    except Exception as exc:
                        raise _ChangeFailed from exc
        except _ChangeFailed:
            for pending in ordered:
                try:
                    with self._transaction() as tx:
                        pending.result, pending.error = pending.work(tx), None
                except Exception as exc:
                    pending.result, pending.error = None, exc

    def _follow_lease(self, lease_seconds: float) -> None:
        """Keep transactions a worker left from holding its calls' rows past a third of
        the shortest lease asked for."""
        _rules.validate_lease(lease_seconds)
        if not self._idle_follows_leases:
            return
        third = max(_SHORTEST_IDLE_IN_TRANSACTION, lease_seconds / 3)
        with self._idle_lock:
            self._idle_in_transaction = min(self._idle_in_transaction, third)

    def _bound_idle_transactions(
        self,
        connection: psycopg.Connection[tuple[Any, ...]],
        also: Mapping[str, str] | None = None,
    ) -> None:
        """Set the current idle-in-transaction timeout (and the settings ``also``) on
        ``connection`` unless it has them: one round trip per connection each time the
        shortest lease drops."""
        wanted = _milliseconds(self._idle_in_transaction)
        with self._idle_lock:
            if not also and self._idle_set_on.get(connection) == wanted:
                return
        _set_session(connection, {**(also or {}), "idle_in_transaction_session_timeout": wanted})
        with self._idle_lock:
            self._idle_set_on[connection] = wanted

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def _migrate(self) -> None:
        latest = MIGRATIONS[-1].version
        schema, table = self._schema, self._table_name
        migrations_table = f'"{schema}"."{table}_migrations"'
        lock_id = int.from_bytes(
            hashlib.sha256(f"openagentcore.store:{schema}.{table}".encode()).digest()[:8],
            "big",
            signed=True,
        )
        with self._transaction() as tx:
            # A migration may wait for workers' row locks and rewrite a large table: the
            # per-statement limits meant for the workers' own changes do not apply.
            tx.execute("SET LOCAL lock_timeout = 0")
            tx.execute("SET LOCAL statement_timeout = 0")
            tx.query("SELECT pg_advisory_xact_lock(%s)", (lock_id,))
            # Asking first avoids needing CREATE on the database when the schema exists.
            if not tx.query("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)):
                tx.execute(f'CREATE SCHEMA "{schema}"')
            # Likewise: CREATE ... IF NOT EXISTS checks the privilege before the name.
            if tx.query("SELECT to_regclass(%s)", (migrations_table,))[0][0] is None:
                tx.execute(
                    f"CREATE TABLE {migrations_table} ("
                    "version INTEGER PRIMARY KEY, description TEXT NOT NULL, "
                    "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
                )
            version = int(
                tx.query(f"SELECT coalesce(max(version), 0) FROM {migrations_table}")[0][0]
            )
            if version > latest:
                raise StoreSchemaError(
                    f"{migrations_table} is at version {version}, newer than the {latest} "
                    "this openagentcore knows; upgrade openagentcore on every worker"
                )
            for migration in MIGRATIONS:
                if migration.version <= version:
                    continue
                for statement in migration.statements_for(self._dialect):
                    tx.execute(statement.format(table=self._table, name=table, prefix=f"{table}_"))
                tx.execute(
                    f"INSERT INTO {migrations_table} (version, description) VALUES (%s, %s)",
                    (migration.version, migration.description),
                )
            self._index_keys_by_digest(tx)

    def _index_keys_by_digest(self, tx: Transaction) -> None:
        """Replace the primary key on the raw ids with a unique index on their digest
        and hash indexes for lookups (see ``_KEY_DIGEST``). Idempotent: it runs on
        every start, under the migration lock, and does nothing once done."""
        table, prefix = self._table, self._table_name
        primary = tx.query(
            "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'",
            (table,),
        )
        if not primary:
            return
        tx.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{primary[0][0]}"')
        tx.execute(f'CREATE UNIQUE INDEX "{prefix}_key_digest" ON {table} (({_KEY_DIGEST}))')
        tx.execute(f'CREATE INDEX "{prefix}_call_id_hash" ON {table} USING hash (call_id)')
        tx.execute(f'CREATE INDEX "{prefix}_session_id_hash" ON {table} USING hash (session_id)')

    def _unavailable(self, exc: Exception) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"the PostgreSQL result store {self._schema}.{self._table_name} is unavailable "
            f"({exc}); retry once the server is reachable"
        )

    def _damaged(self, exc: Exception) -> StoreCorruptError:
        return StoreCorruptError(
            f"the PostgreSQL result store {self._schema}.{self._table_name} holds a damaged "
            f"row: {exc}. Repair or delete that row by hand; until then reads that meet it "
            "fail"
        )

    def _open_pool(self) -> psycopg_pool.ConnectionPool[psycopg.Connection[tuple[Any, ...]]]:
        if self._pool is None:
            raise StoreClosedError(f"{self!r} is closed; open the store again")
        return self._pool

    def _refused_value(self, exc: Exception) -> StoreKeyError:
        # The driver's message can quote the value (an id of kilobytes); name the
        # problem, not the data.
        return StoreKeyError(
            f"PostgreSQL cannot store this call in {self._schema}.{self._table_name}: "
            f"{type(exc).__name__} ({_first_line(exc)}). Ids and function names must not "
            "contain NUL characters; this will not succeed on retry"
        )

    @contextmanager
    def _transaction(self) -> Iterator[Transaction]:
        pool = self._open_pool()
        try:
            with pool.connection() as connection:
                self._bound_idle_transactions(connection)
                with connection.transaction():
                    yield _PostgresTransaction(connection)
        except self._value_errors as exc:
            raise self._refused_value(exc) from None
        except self._unavailable_errors as exc:
            raise self._unavailable(exc) from exc
        except DamagedRowError as exc:
            raise self._damaged(exc) from exc

    @contextmanager
    def _reading(self) -> Iterator[Transaction]:
        pool = self._open_pool()
        try:
            with pool.connection() as connection:
                yield _PostgresTransaction(connection)
        except self._value_errors as exc:
            raise self._refused_value(exc) from None
        except self._unavailable_errors as exc:
            raise self._unavailable(exc) from exc
        except DamagedRowError as exc:
            raise self._damaged(exc) from exc


class _ChangeFailed(Exception):
    """One change of a shared transaction failed: roll it back, commit each alone."""


def _set_session(connection: psycopg.Connection[Any], settings: Mapping[str, str]) -> None:
    """Set server settings for the rest of the session, in one round trip."""
    calls = ", ".join("set_config(%s, %s, false)" for _ in settings)
    params = [part for setting in settings.items() for part in setting]
    connection.execute(f"SELECT {calls}", params)


def _first_line(exc: Exception) -> str:
    """The start of a driver message, short enough to log on every attempt."""
    return str(exc).splitlines()[0][:200] if str(exc) else "no detail"
