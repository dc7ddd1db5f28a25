"""What a person types into ``calls resolve`` / ``calls list`` must get an answer
(done, or refused with a reason), never an internal error, and never a changed store
when refused. Against LocalCore over loopback HTTP and real SQLite / PostgreSQL."""

from __future__ import annotations

import time

import pytest

from openagentcore.cli import EXIT_OK, main
from openagentcore.store import CallKey, CallState
from openagentcore.store._records import process_host

from . import test_in_doubt as _in_doubt
from .test_in_doubt import Setup, StoreUnderTest, _leave_in_doubt, _leave_refused, _stored

#: The SQLite / PostgreSQL store fixture of the in-doubt CLI tests.
store = _in_doubt.store

#: The exit code ``main`` gives an exception it did not expect ("This is a bug").
EXIT_BUG = 70


@pytest.mark.parametrize("kind", ["in_doubt", "rejected"])
def test_calls_resolve_failed_with_undecodable_bytes_is_refused_not_a_bug(
    setup: Setup, store: StoreUnderTest, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """A message that is not valid UTF-8 on the command line (Python hands it over with
    lone surrogates, ``\\udcff``). ``--output`` refuses such text with a usage error,
    but ``--failed`` does not check it (``failure_event`` has no content check), so the
    store (or the client, for a rejected call) raises ``UnicodeEncodeError`` and the
    command ends with exit 70 and "This is a bug in openagentcore". The store is left
    alone, but the operator is told the SDK is broken instead of what to fix."""
    _, session_id, action, _ = setup
    if kind == "in_doubt":
        key = _leave_in_doubt(store, session_id, action)
    else:
        key = _leave_refused(store, session_id, action)
    before = _stored(store, key).state

    try:
        code = main(["calls", "resolve", action.call_id, *store.args, "--failed", "bad \udcff"])
    except SystemExit as exited:  # a usage error (parser.error), as --output gives
        code = exited.code

    err = capsys.readouterr().err
    assert code != EXIT_BUG, err
    assert "This is a bug" not in err
    assert _stored(store, key).state is before


def test_calls_list_survives_a_record_whose_owner_id_holds_a_huge_pid(
    setup: Setup, store: StoreUnderTest, capsys: pytest.CaptureFixture[str]
) -> None:
    """One record whose owner id names this host with a pid beyond a C int (written by
    another tool, a bug, or by hand): ``calls list`` asks ``is_stale`` of every started
    record, ``owner_is_dead`` passes the pid to ``os.kill`` and ``OverflowError`` ends
    the whole listing ("This is a bug", exit 70), so the operator sees no call at all."""
    _, session_id, action, _ = setup
    key = CallKey(session_id, action.turn_id, action.call_id)
    opened = store.open()
    try:
        assert opened.claim(
            key,
            function_name="refund",
            arguments_hash="x",
            owner=f"{process_host()}:{2**31}:1-abcdef",
            lease_seconds=600,
        ).won
    finally:
        opened.close()
    time.sleep(0.01)

    code = main(["calls", "list", *store.args])

    captured = capsys.readouterr()
    assert code == EXIT_OK, captured.err
    assert action.call_id in captured.out
    assert _stored(store, key).state is CallState.STARTED
