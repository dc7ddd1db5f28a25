"""Store hardening: SQLite files private whatever form their path takes, PostgreSQL
transactions of a worker cut off from the database that do not hold a call for longer
than a third of its lease, and idempotency keys that no two calls share."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from _tcp_proxy import TcpProxy, postgres_proxy
from openagentcore._base_client import MAX_IDEMPOTENCY_KEY_BYTES
from openagentcore.runner._effects import Batch
from openagentcore.store import (
    CallKey,
    CallState,
    Claim,
    PostgresResultStore,
    SQLiteResultStore,
    StoreError,
    StoreUnavailableError,
    idempotency_key_for,
)
from openagentcore.store._records import answer_idempotency_key

KEY = CallKey(session_id="se_1", turn_id="tu_1", call_id="call_1")


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, set here so that the result does not depend on the environment."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


# --- SQLite file permissions -------------------------------------------------------------

#: Each form of path a store may be opened with: it builds the path in ``directory``
#: (the working directory is ``directory`` too) and returns it with the file SQLite
#: ends up writing.
PathForm = Callable[[Path], tuple[str, Path]]


def _plain(directory: Path) -> tuple[str, Path]:
    return str(directory / "calls.db"), directory / "calls.db"


def _relative(directory: Path) -> tuple[str, Path]:
    return "calls.db", directory / "calls.db"


def _symlink_to_existing_store(directory: Path) -> tuple[str, Path]:
    target = directory / "real.db"
    SQLiteResultStore(target).close()
    (directory / "calls.db").symlink_to(target)
    return str(directory / "calls.db"), target


def _dangling_symlink(directory: Path) -> tuple[str, Path]:
    (directory / "calls.db").symlink_to(directory / "real.db")
    return str(directory / "calls.db"), directory / "real.db"


def _dangling_relative_symlink(directory: Path) -> tuple[str, Path]:
    (directory / "data").mkdir()
    (directory / "calls.db").symlink_to("data/real.db")
    return "calls.db", directory / "data" / "real.db"


def _uri(directory: Path) -> tuple[str, Path]:
    return f"file:{directory}/calls.db", directory / "calls.db"


def _relative_uri_with_query(directory: Path) -> tuple[str, Path]:
    return "file:calls.db?mode=rwc", directory / "calls.db"


def _uri_with_authority_and_escapes(directory: Path) -> tuple[str, Path]:
    return f"file://localhost{directory}/my%20calls.db?cache=private", directory / "my calls.db"


def _uri_to_dangling_symlink(directory: Path) -> tuple[str, Path]:
    (directory / "calls.db").symlink_to(directory / "real.db")
    return f"file:{directory}/calls.db", directory / "real.db"


@pytest.mark.usefixtures("umask_022")
@pytest.mark.parametrize(
    "form",
    [
        _plain,
        _relative,
        _symlink_to_existing_store,
        _dangling_symlink,
        _dangling_relative_symlink,
        _uri,
        _relative_uri_with_query,
        _uri_with_authority_and_escapes,
        _uri_to_dangling_symlink,
    ],
)
def test_every_sqlite_store_file_is_private_whatever_the_form_of_its_path(
    form: PathForm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saved results are function outputs in clear text: a dangling symlink or a
    ``file:`` URI gave the database, ``-wal`` and ``-shm`` files mode 0644."""
    monkeypatch.chdir(tmp_path)
    path, database = form(tmp_path)
    store = SQLiteResultStore(path)
    try:
        store.claim(KEY, function_name="f", arguments_hash="h", owner="me", lease_seconds=30)
        store.save_result(KEY, owner="me", result={"type": "x", "output": "secret"})
        written = {
            file.name: stat.S_IMODE(file.stat().st_mode)
            for file in database.parent.iterdir()
            if file.name.startswith(database.name) and not file.is_symlink()
        }
    finally:
        store.close()
    expected = {database.name + suffix: 0o600 for suffix in ("", "-wal", "-shm")}
    assert written == expected
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("file:")) == []


def test_a_uri_that_does_not_let_sqlite_create_the_file_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError, match="cannot open"):
        SQLiteResultStore(f"file:{tmp_path}/calls.db?mode=rw")
    assert list(tmp_path.iterdir()) == []


# --- idempotency keys --------------------------------------------------------------------

ids = st.text(max_size=12)


def test_ids_holding_the_old_separator_no_longer_share_a_key() -> None:
    """The ids were joined with U+001F, so these two calls of one Session got one key:
    the server would take the second call's result as a retry of the first's and drop
    it, or refuse it as an idempotency conflict."""
    first = CallKey("sess", "turn\x1fcall", "x")
    second = CallKey("sess", "turn", "call\x1fx")

    assert idempotency_key_for(first) != idempotency_key_for(second)


@given(first=st.tuples(ids, ids, ids), second=st.tuples(ids, ids, ids))
@example(first=("s", "t\x1fc", "x"), second=("s", "t", "c\x1fx"))
@example(first=("s\x1ft", "c", "x"), second=("s", "t\x1fc", "x"))
@example(first=("1:a", "b", "c"), second=("1", "a1:b", "c"))
def test_distinct_calls_get_distinct_keys_the_server_accepts(
    first: tuple[str, str, str], second: tuple[str, str, str]
) -> None:
    key = idempotency_key_for(CallKey(*first))

    assert 1 <= len(key.encode("ascii")) <= MAX_IDEMPOTENCY_KEY_BYTES
    assert key.isprintable()
    assert (key == idempotency_key_for(CallKey(*second))) == (first == second)


def _key_before_this_version(key: CallKey) -> str:
    """How earlier versions derived a call's key: the ids joined with U+001F."""
    joined = "\x1f".join((key.session_id, key.turn_id, key.call_id))
    return "oac-" + hashlib.sha256(joined.encode("utf-8", "surrogatepass")).hexdigest()


def test_a_result_saved_before_the_upgrade_is_sent_again_under_its_stored_key(
    tmp_path: Path,
) -> None:
    """The key is stored with the call when it is claimed: a result saved by an earlier
    version is resubmitted (and answered by hand) under the key it was first sent with."""
    path = tmp_path / "calls.db"
    with SQLiteResultStore(path) as store:
        store.claim(KEY, function_name="f", arguments_hash="h", owner="me", lease_seconds=30)
        store.save_result(KEY, {"type": "x", "output": "1"}, owner="me")
    legacy = _key_before_this_version(KEY)
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("UPDATE openagentcore_calls SET idempotency_key = ?", (legacy,))

    with SQLiteResultStore(path) as store:
        record = store.get(KEY)
        assert record is not None
        store.mark(KEY, CallState.REJECTED)
        refused = store.get(KEY)
        assert refused is not None

    assert record.idempotency_key == legacy != idempotency_key_for(KEY)
    assert Batch(KEY.session_id, (record,)).idempotency_key == legacy
    answer = answer_idempotency_key(refused, '{"type": "x"}')
    assert answer.startswith(legacy + "-m")
    assert answer != answer_idempotency_key(refused, '{"type": "y"}')


# --- PostgreSQL: a worker cut off in the middle of a transaction -------------------------

#: The simple-protocol message psycopg sends to commit a transaction.
COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"


@pytest.fixture
def cut_off(postgres_schema: tuple[str, str], fresh_table: str) -> Iterator[tuple[TcpProxy, str]]:
    """A proxy to the test database, and a DSN that connects through it (its
    ``application_name`` is the test's table)."""
    dsn, _ = postgres_schema
    proxy, through = postgres_proxy(dsn, application_name=fresh_table)
    with proxy:
        yield proxy, through


def _cut_off_backends(dsn: str, table: str) -> int:
    """How many connections through the proxy sit idle in a transaction."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE application_name = %s AND state = 'idle in transaction'",
            (table,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _eventually(check: Callable[[], bool], what: str, *, within: float = 30.0) -> None:
    """Poll ``check`` until it holds; the bound is generous, for a loaded machine."""
    give_up = time.monotonic() + within
    while not check():
        if time.monotonic() > give_up:
            pytest.fail(f"{what} did not happen within {within} s")
        time.sleep(0.05)


def _in_background(work: Callable[[], object]) -> threading.Thread:
    """Run ``work`` of the cut-off worker, which hangs until the proxy closes."""

    def run() -> None:
        with contextlib.suppress(StoreError):
            work()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


LEASE = 3.0


@pytest.mark.postgres
def test_a_claim_cut_off_before_its_commit_does_not_hold_the_call(
    postgres_schema: tuple[str, str], fresh_table: str, cut_off: tuple[TcpProxy, str]
) -> None:
    """The cut-off worker's uncommitted claim made every other claim of the call wait
    on it, then fail with lock_timeout, for as long as TCP kept the connection (hours):
    the call was blocked and the store reported unreachable."""
    dsn, schema = postgres_schema
    proxy, through_proxy = cut_off
    with PostgresResultStore(dsn, schema=schema, table=fresh_table, pool_size=1) as other:
        lost = PostgresResultStore(through_proxy, schema=schema, table=fresh_table, pool_size=1)
        proxy.freeze_on(COMMIT)
        worker = _in_background(
            lambda: lost.claim(
                KEY, function_name="f", arguments_hash="h", owner="lost", lease_seconds=LEASE
            )
        )
        assert proxy.frozen.wait(30)
        _eventually(lambda: _cut_off_backends(dsn, fresh_table) == 1, "the cut-off")

        claim = _eventually_claimed(other)

        assert claim.won
        assert claim.record.owner == "other"
        _eventually(lambda: _cut_off_backends(dsn, fresh_table) == 0, "the end of the cut-off")
        proxy.close()
        worker.join(timeout=30)
        lost.close()


def _eventually_claimed(store: PostgresResultStore, *, within: float = 30.0) -> Claim:
    give_up = time.monotonic() + within
    while True:
        try:
            return store.claim(
                KEY, function_name="f", arguments_hash="h", owner="other", lease_seconds=LEASE
            )
        except StoreUnavailableError:
            if time.monotonic() > give_up:
                raise


@pytest.mark.postgres
def test_a_change_cut_off_before_its_commit_does_not_hold_the_calls_row(
    postgres_schema: tuple[str, str], fresh_table: str, cut_off: tuple[TcpProxy, str]
) -> None:
    """A worker cut off while saving a result kept the row locked: no other worker could
    take the call over once its lease ran out, however long it tried."""
    dsn, schema = postgres_schema
    proxy, through_proxy = cut_off
    with PostgresResultStore(dsn, schema=schema, table=fresh_table, pool_size=1) as other:
        lost = PostgresResultStore(through_proxy, schema=schema, table=fresh_table, pool_size=1)
        lost.claim(KEY, function_name="f", arguments_hash="h", owner="lost", lease_seconds=LEASE)
        proxy.freeze_on(COMMIT)
        worker = _in_background(lambda: lost.save_result(KEY, {"type": "x"}, owner="lost"))
        assert proxy.frozen.wait(30)
        _eventually(lambda: _cut_off_backends(dsn, fresh_table) == 1, "the cut-off")

        taken = _eventually_taken_over(other)

        assert taken.record.owner == "other"
        assert taken.record.attempts == 2
        assert taken.record.result is None  # the cut-off save was rolled back
        proxy.close()
        worker.join(timeout=30)
        lost.close()


def _eventually_taken_over(store: PostgresResultStore, *, within: float = 30.0) -> Claim:
    """Take the call over once its lease has run out (by the database's clock)."""
    give_up = time.monotonic() + within
    while True:
        try:
            claim = store.take_over(KEY, owner="other", lease_seconds=LEASE, expected_attempts=1)
        except StoreUnavailableError:
            claim = None
        if claim is not None and claim.won:
            return claim
        if time.monotonic() > give_up:
            pytest.fail(f"the call could not be taken over within {within} s")
        time.sleep(0.05)


def _shown(store: PostgresResultStore, setting: str) -> str:
    """A setting as a store's transaction sees it on the server."""
    with store._transaction() as tx:
        return str(tx.query(f"SHOW {setting}")[0][0])


def _connection_parameters(store: PostgresResultStore) -> dict[str, str]:
    with store._open_pool().connection() as connection:
        return connection.info.get_parameters()


@pytest.mark.postgres
def test_store_connections_end_orphaned_transactions_within_a_third_of_the_lease(
    postgres_schema: tuple[str, str], fresh_table: str
) -> None:
    """Nothing ended a transaction its worker had left: PostgreSQL kept it, and its
    locks, until TCP gave up."""
    dsn, schema = postgres_schema
    with PostgresResultStore(dsn, schema=schema, table=fresh_table, pool_size=2) as store:
        before_any_lease = _shown(store, "idle_in_transaction_session_timeout")
        store.claim(KEY, function_name="f", arguments_hash="h", owner="me", lease_seconds=9)
        after_a_claim = _shown(store, "idle_in_transaction_session_timeout")
        store.renew_lease(KEY, owner="me", lease_seconds=90)
        after_a_longer_lease = _shown(store, "idle_in_transaction_session_timeout")
        store.take_over(KEY, owner="me", lease_seconds=0.05, expected_attempts=1)
        after_a_tiny_lease = _shown(store, "idle_in_transaction_session_timeout")
        lock_timeout = _shown(store, "lock_timeout")

    assert before_any_lease == "20s"  # a third of the runner's default lease
    assert after_a_claim == "3s"
    assert after_a_longer_lease == "3s"  # the shortest lease asked for rules
    assert after_a_tiny_lease == "1s"  # a live worker may pause that long on a busy host
    assert lock_timeout == "5s"


@pytest.mark.postgres
def test_an_explicit_idle_in_transaction_timeout_is_kept(
    postgres_schema: tuple[str, str], fresh_table: str
) -> None:
    dsn, schema = postgres_schema
    with PostgresResultStore(
        dsn, schema=schema, table=fresh_table, idle_in_transaction_timeout=2.5
    ) as store:
        store.claim(KEY, function_name="f", arguments_hash="h", owner="me", lease_seconds=0.3)

        assert _shown(store, "idle_in_transaction_session_timeout") == "2500ms"

    with pytest.raises(ValueError, match="idle_in_transaction_timeout"):
        PostgresResultStore(dsn, schema=schema, table=fresh_table, idle_in_transaction_timeout=0)


@pytest.mark.postgres
def test_store_connections_notice_a_database_gone_from_the_network(
    postgres_schema: tuple[str, str], fresh_table: str
) -> None:
    """Without keepalives or tcp_user_timeout, a worker whose database vanished waited
    on the dead connection until TCP gave up."""
    dsn, schema = postgres_schema
    with PostgresResultStore(dsn, schema=schema, table=fresh_table) as store:
        parameters = _connection_parameters(store)

    assert parameters["keepalives"] == "1"
    assert int(parameters["keepalives_idle"]) <= 10
    assert int(parameters["keepalives_interval"]) <= 5
    assert int(parameters["keepalives_count"]) >= 1
    assert 0 < int(parameters["tcp_user_timeout"]) <= 30_000


@pytest.mark.postgres
def test_dead_peer_settings_in_the_dsn_are_kept(
    postgres_schema: tuple[str, str], fresh_table: str
) -> None:
    import psycopg.conninfo

    dsn, schema = postgres_schema
    own = psycopg.conninfo.make_conninfo(dsn, keepalives_idle=42, tcp_user_timeout=60000)
    with PostgresResultStore(own, schema=schema, table=fresh_table) as store:
        parameters = _connection_parameters(store)

    assert parameters["keepalives_idle"] == "42"
    assert parameters["tcp_user_timeout"] == "60000"
    assert parameters["keepalives"] == "1"
