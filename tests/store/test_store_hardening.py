"""Store hardening: SQLite files private whatever form their path takes, PostgreSQL
transactions of a worker cut off from the database that do not hold a call for longer
than a third of its lease, and idempotency keys that no two calls share."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from openagentcore._base_client import MAX_IDEMPOTENCY_KEY_BYTES
from openagentcore.runner._effects import Batch
from openagentcore.store import (
    CallKey,
    CallState,
    SQLiteResultStore,
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
