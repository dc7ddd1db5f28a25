"""The ``openagentcore`` commands that inspect and settle a store, over real HTTP."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from openagentcore import Client, SQLiteResultStore
from openagentcore.cli import main
from openagentcore.store import CallKey, CallState, StoreUnavailableError
from openagentcore.types import FunctionCallAction

from ._support import save_result as _save_result


def test_pending_says_which_calls_have_saved_results(
    setup: tuple[Client, str, FunctionCallAction, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, session_id, action, store_path = setup
    SQLiteResultStore(store_path).close()
    assert main(["pending", session_id, "--store", str(store_path)]) == 0
    assert "not in the store" in capsys.readouterr().out

    _save_result(store_path, session_id, action)
    assert main(["pending", session_id, "--store", str(store_path)]) == 0
    out = capsys.readouterr().out
    assert f"call {action.call_id}: saved result (completed)" in out
    assert "requires_action" in out


def test_recover_resubmits_the_saved_result_and_settles_the_session(
    setup: tuple[Client, str, FunctionCallAction, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    client, session_id, action, store_path = setup
    key = _save_result(store_path, session_id, action)

    assert main(["recover", session_id, "--store", str(store_path)]) == 0
    assert "1 saved result(s) resubmitted" in capsys.readouterr().out

    outputs = [
        item
        for item in client.sessions.items.list(session_id, order="asc")
        if item.type == "function_call_output"
    ]
    assert [(o.call_id, o.output) for o in outputs] == [(action.call_id, "refunded")]  # type: ignore[union-attr]
    store = SQLiteResultStore(store_path)
    record = store.get(key)
    store.close()
    assert record is not None
    assert record.state is CallState.SUBMITTED


def test_recover_lists_a_call_in_doubt_without_resolving_it(
    setup: tuple[Client, str, FunctionCallAction, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    client, session_id, action, store_path = setup
    key = CallKey(session_id, action.turn_id, action.call_id)
    store = SQLiteResultStore(store_path)
    store.claim(
        key,
        function_name=action.name,
        arguments_hash="x",
        owner="another-host:1:ab",
        lease_seconds=0.01,
    )
    store.close()
    time.sleep(0.05)  # the other host's lease expires without a saved result

    # A call in doubt that nobody settled needs a runner or a person: exit 1.
    assert main(["recover", session_id, "--store", str(store_path)]) == 1
    assert f"in doubt: call {action.call_id}" in capsys.readouterr().out
    assert client.sessions.retrieve(session_id).status == "requires_action"


def test_recover_says_when_the_store_was_unreachable(
    setup: tuple[Client, str, FunctionCallAction, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, session_id, action, store_path = setup
    _save_result(store_path, session_id, action)

    def unreachable(self: SQLiteResultStore, key: CallKey) -> None:
        raise StoreUnavailableError("database is locked")

    monkeypatch.setattr(SQLiteResultStore, "get", unreachable)

    assert main(["recover", session_id, "--store", str(store_path)]) == 1
    output = capsys.readouterr().out
    assert "0 saved result(s) resubmitted" in output
    assert "the result store was unreachable 1 time(s)" in output
    assert client.sessions.retrieve(session_id).status == "requires_action"


def test_calls_list_and_show(
    setup: tuple[Client, str, FunctionCallAction, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, session_id, action, store_path = setup
    _save_result(store_path, session_id, action)

    assert main(["calls", "list", "--store", str(store_path), "--state", "completed"]) == 0
    listing = capsys.readouterr().out
    assert action.call_id in listing
    assert "1 call(s)" in listing

    assert main(["calls", "show", action.call_id, "--store", str(store_path)]) == 0
    shown = capsys.readouterr().out
    assert "result:        succeeded: refunded" in shown
    assert "{" not in shown  # text for a person; --json gives the document
    assert main(["calls", "show", "call_missing", "--store", str(store_path)]) == 1


def test_calls_list_rejects_an_unknown_state(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["calls", "list", "--store", str(tmp_path / "x.db"), "--state", "bogus"])


def test_calls_prune_keeps_records_a_live_runner_may_still_need(
    setup: tuple[Client, str, FunctionCallAction, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A submitted record is what stops a runner that acts on a Session read from before
    the result was accepted (the call still listed) from running the call again: pruning
    it within the hour takes ``--force``."""
    _, session_id, action, store_path = setup
    key = _save_result(store_path, session_id, action)
    store = SQLiteResultStore(store_path)
    store.mark(key, CallState.SUBMITTED)
    store.close()

    with pytest.raises(SystemExit) as refused:
        main(["calls", "prune", "--store", str(store_path), "--older-than", "59m"])

    assert refused.value.code == 2
    assert "--force" in capsys.readouterr().err
    assert main(["calls", "prune", "--store", str(store_path), "--older-than", "1h"]) == 0
    assert "Removed 0 finished call(s)" in capsys.readouterr().out


def test_calls_prune_removes_only_calls_that_need_nothing_more(
    setup: tuple[Client, str, FunctionCallAction, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, session_id, action, store_path = setup
    key = _save_result(store_path, session_id, action)
    prune = ["calls", "prune", "--store", str(store_path), "--force"]
    assert main([*prune, "--older-than", "0"]) == 0
    # Saved but not confirmed submitted: the server may still need it.
    assert "Removed 0 finished call(s)" in capsys.readouterr().out

    store = SQLiteResultStore(store_path)
    store.mark(key, CallState.SUBMITTED)
    store.close()
    time.sleep(0.01)
    assert main([*prune, "--older-than", "0s"]) == 0
    assert "Removed 1 finished call(s)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["calls", "prune", "--store", str(store_path), "--older-than", "soon"])
