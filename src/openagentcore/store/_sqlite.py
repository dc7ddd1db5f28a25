"""A result store in one SQLite file, shared by the runner processes of one machine."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import tenacity

from ._base import Clock
from ._exceptions import (
    StoreClosedError,
    StoreCorruptError,
    StoreSchemaError,
    StoreUnavailableError,
)
from ._group import GroupCommit, PendingWrite
from ._records import Liveness, process_liveness
from ._rules import DamagedRowError
from ._sql import MIGRATIONS, SQLResultStore, Transaction

__all__ = ["SQLiteResultStore"]

_TABLE = "openagentcore_calls"
#: The most callers' changes one group commit takes.
_GROUP_LIMIT = 64

T = TypeVar("T")


class _SQLiteTransaction:
    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        return self._connection.execute(sql, params).fetchall()

    def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        return self._connection.execute(sql, params).rowcount


class SQLiteResultStore(SQLResultStore):
    """Records in a SQLite file that several threads and processes can share.

    The file is in WAL mode with ``synchronous=FULL``, so a claim or a saved result is on
    disk when its method returns. Progress marks (:meth:`mark`) do not wait for the disk:
    they survive a crash of the process, and a power cut can only undo marks made since
    the last synced write, so a runner sends those saved results again (the server takes
    an identical resubmission as a retry). Writers take the database lock up front
    (``BEGIN IMMEDIATE``) and wait up to ``busy_timeout`` seconds for each other; after
    that the method raises :class:`StoreUnavailableError`. Changes that threads of one
    store make at the same time share a transaction and its disk sync (group commit): a
    change made while no commit runs is committed at once, one made during a commit
    waits for it to end, then commits with every change queued meanwhile; each caller
    gets its own outcome, as its own transaction would give it. The file must be on a local
    disk: SQLite locking is unreliable over network file systems, so use
    :class:`PostgresResultStore` for many hosts. The schema is created on first use and
    versioned in ``PRAGMA user_version``.
    """

    _dialect = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        clock: Clock = time.time,
        liveness: Liveness = process_liveness,
    ) -> None:
        super().__init__(table=_TABLE, clock=clock, liveness=liveness)
        self._path = os.fspath(path)
        self._lock = threading.RLock()
        #: One writer at a time: SQLite has one write lock per database.
        self._group = GroupCommit(
            self._commit_batch, slots=1, limit=_GROUP_LIMIT, interrupted=self._interrupted
        )
        self._synchronous = "FULL"
        #: The file SQLite writes, once a ``file:`` URI is decoded (``None``: in memory).
        self._file_name, creates = _database_file(self._path)
        if creates and self._file_name is not None:
            _create_private(self._file_name)
        try:
            connection = sqlite3.connect(
                self._path,
                timeout=busy_timeout,
                # Whether or not this SQLite was built to read URIs by default.
                uri=self._path.startswith("file:"),
                isolation_level=None,  # transactions are begun and committed explicitly
                check_same_thread=False,  # every use is serialized by self._lock
            )
        except sqlite3.OperationalError as exc:
            raise StoreUnavailableError(
                f"cannot open the SQLite result store at {self._path!r}: {exc}. "
                "Check that the directory exists and is writable."
            ) from exc
        self._connection: sqlite3.Connection | None = connection
        #: The file this store opened: writes check that its path still names it.
        self._file = _file_identity(self._file_name)
        # Switching a new file to WAL can answer "database is locked" at once, without
        # waiting on busy_timeout, while another process creates the same store: retry.
        opening = tenacity.Retrying(
            retry=tenacity.retry_if_exception(_is_locked),
            wait=tenacity.wait_random_exponential(multiplier=0.01, max=0.25),
            stop=tenacity.stop_after_delay(busy_timeout),
            reraise=True,
        )
        try:
            for attempt in opening:
                with attempt:
                    self._configure(connection)
                    self._migrate()
        except sqlite3.OperationalError as exc:
            self.close()
            raise _unavailable(self._path, exc) from exc
        except sqlite3.DatabaseError as exc:
            self.close()
            raise _corrupt(self._path, exc) from exc
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"SQLiteResultStore({self._path!r})"

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    def _damaged(self, exc: Exception) -> StoreCorruptError:
        return _corrupt(self._path, exc)

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    @staticmethod
    def _configure(connection: sqlite3.Connection) -> None:
        mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode not in ("wal", "memory"):  # an in-memory database has no journal file
            raise StoreUnavailableError(
                f"SQLite refused WAL mode (journal_mode is {mode!r}); "
                "put the result store on a local file system"
            )
        connection.execute("PRAGMA synchronous=FULL")

    def _migrate(self) -> None:
        latest = MIGRATIONS[-1].version
        with self._transaction() as tx:
            version = int(tx.query("PRAGMA user_version")[0][0])
            if version > latest:
                raise StoreSchemaError(
                    f"{self._path!r} has schema version {version}, newer than the {latest} "
                    "this openagentcore knows; upgrade openagentcore"
                )
            for migration in MIGRATIONS:
                if migration.version > version:
                    for statement in migration.statements_for(self._dialect):
                        tx.execute(statement.format(table=_TABLE, name=_TABLE, prefix=f"{_TABLE}_"))
            if version != latest:
                # PRAGMA takes no parameters; ``latest`` is an int from this module.
                tx.execute(f"PRAGMA user_version = {latest:d}")

    def _interrupted(self) -> Exception:
        return StoreUnavailableError(
            f"a change to {self._path!r} was interrupted before it was committed; retry it"
        )

    def _commit_batch(self, batch: list[PendingWrite[Any]]) -> None:
        """Run the changes in one transaction, each under a savepoint so that one
        change's error undoes only that change and reaches only its caller, as its own
        transaction would; a failed commit fails them all."""
        # Progress marks alone need not wait for the disk: a lost one costs an
        # identical resubmission, and the next synced commit flushes them too.
        self._set_synchronous("FULL" if any(p.synced for p in batch) else "NORMAL")
        with self._transaction() as tx:
            if len(batch) == 1:  # alone: its error rolls back the whole transaction
                batch[0].result = batch[0].work(tx)
                return
            connection = self._open_connection()
            for pending in batch:
                tx.execute("SAVEPOINT change")
                try:
                    pending.result = pending.work(tx)
                except Exception as exc:
                    if isinstance(exc, sqlite3.Error) and not connection.in_transaction:
                        raise  # SQLite rolled the transaction back: the whole batch fails
                    tx.execute("ROLLBACK TO change")
                    pending.error = self._as_alone(exc)
                tx.execute("RELEASE change")

    def _as_alone(self, exc: Exception) -> Exception:
        """The error a change's caller would get had the change been committed alone."""
        error: Exception = exc
        if isinstance(exc, sqlite3.OperationalError):
            error = _unavailable(self._path, exc)
        elif isinstance(exc, (sqlite3.DatabaseError, DamagedRowError)):
            error = _corrupt(self._path, exc)
        if error is not exc:
            error.__cause__ = exc
        return error

    def _set_synchronous(self, level: str) -> None:
        if level != self._synchronous:
            self._open_connection().execute(f"PRAGMA synchronous={level}")
            self._synchronous = level

    def _open_connection(self) -> sqlite3.Connection:
        if self._connection is None:
            raise StoreClosedError(f"{self!r} is closed; open the store again")
        return self._connection

    @contextmanager
    def _transaction(self) -> Iterator[Transaction]:
        with self._lock:
            connection = self._open_connection()
            try:
                connection.execute("BEGIN IMMEDIATE")
                if _file_identity(self._file_name) != self._file:
                    connection.execute("ROLLBACK")
                    raise StoreUnavailableError(
                        f"the SQLite result store at {self._path!r} was deleted or replaced "
                        "while this process had it open, so nothing more is written: another "
                        "process would not see it. Put the file back, or stop every runner "
                        "using it (calls they had started are then not deduplicated)"
                    )
                try:
                    yield _SQLiteTransaction(connection)
                except BaseException:
                    connection.execute("ROLLBACK")
                    raise
                connection.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise _unavailable(self._path, exc) from exc
            except (sqlite3.DatabaseError, DamagedRowError) as exc:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise _corrupt(self._path, exc) from exc

    @contextmanager
    def _reading(self) -> Iterator[Transaction]:
        with self._lock:
            connection = self._open_connection()
            try:
                yield _SQLiteTransaction(connection)
            except sqlite3.OperationalError as exc:
                raise _unavailable(self._path, exc) from exc
            except (sqlite3.DatabaseError, DamagedRowError) as exc:
                raise _corrupt(self._path, exc) from exc


def _database_file(path: str) -> tuple[str | None, bool]:
    """The file SQLite opens for ``path`` (a ``file:`` URI decoded as SQLite decodes it,
    ``None`` for an in-memory database) and whether SQLite may create it (not in the
    URI's ``mode=ro`` or ``mode=rw``)."""
    if path in ("", ":memory:"):
        return None, False
    if not path.startswith("file:"):
        return path, True
    rest = path[len("file:") :].partition("#")[0]
    name, _, query = rest.partition("?")
    if name.startswith("//"):  # an authority: SQLite accepts only "" and "localhost"
        slash = name.find("/", 2)
        name = "" if slash < 0 else name[slash:]
    name = urllib.parse.unquote(name)
    parameters = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    mode = parameters.get("mode", "rwc")
    if name in ("", ":memory:") or mode == "memory":
        return None, False
    return name, mode == "rwc"


def _file_identity(path: str | None) -> tuple[int, int] | None:
    """The device and inode ``path`` names now (``None``: missing, or not a file)."""
    if path is None:
        return None
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def _create_private(path: str) -> None:
    """Create the database file readable by its owner only, before SQLite does.

    Saved results are function outputs in clear text. SQLite gives the ``-wal``,
    ``-shm`` and ``-journal`` files the database file's permissions, so all of them end
    up ``0600`` whatever the umask. The file is created where the path leads: at the
    target of a symlink that dangles, at the path a ``file:`` URI names. An existing
    file keeps the permissions its owner chose, and is not opened here: closing a
    descriptor of it would drop the locks SQLite holds on it in this process.
    """
    target = os.path.realpath(path)
    if os.path.lexists(target):
        return
    try:
        os.close(os.open(target, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:  # another process created it first
        pass
    except OSError:
        return  # sqlite3.connect reports a missing directory in its own words


def _corrupt(path: str, exc: Exception) -> StoreCorruptError:
    what = str(exc)
    return StoreCorruptError(
        f"the SQLite result store at {path!r} is damaged: {what}. Move the file aside "
        "and start with a new one; the calls it recorded will not be deduplicated"
    )


def _unavailable(path: str, exc: sqlite3.OperationalError) -> StoreUnavailableError:
    return StoreUnavailableError(
        f"the SQLite result store at {path!r} failed: {exc}. If it says 'database is "
        "locked', another process held the write lock longer than busy_timeout; retry."
    )


def _is_locked(error: BaseException) -> bool:
    return isinstance(error, sqlite3.OperationalError) and "locked" in str(error)
