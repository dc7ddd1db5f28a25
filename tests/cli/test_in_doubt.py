"""Calls in doubt from the command line: listing them, settling them by hand, and
recovering every Session of an Agent (issue 15). Against real SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import pty
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from openagentcore import Client, FunctionRunner, PostgresResultStore, SQLiteResultStore
from openagentcore.cli import EXIT_ATTENTION, EXIT_OK, main
from openagentcore.store import CallKey, CallRecord, CallState, ResultStore, new_owner_id
from openagentcore.store._base import StoreBase
from openagentcore.store._records import owner_closed, owner_opened
from openagentcore.types import FunctionCallAction, FunctionCallOutputItem

from ._support import TOOL, pending_call

Setup = tuple[Client, str, FunctionCallAction, Path]


@dataclass
class StoreUnderTest:
    """A result store the CLI opens with ``args``, and the tests open with ``open``."""

    args: list[str]
    kind: str
    path: Path | None = None
    dsn: str = ""
    table: str = ""

    def open(self) -> ResultStore:
        if self.path is not None:
            return SQLiteResultStore(self.path)
        return PostgresResultStore(self.dsn, table=self.table)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreUnderTest]:
    if request.param == "sqlite":
        path = tmp_path / "calls.db"
        SQLiteResultStore(path).close()
        yield StoreUnderTest(["--store", str(path)], "sqlite", path=path)
        return
    dsn = os.environ.get("OPENAGENTCORE_TEST_POSTGRES_DSN")
    if not dsn:
        pytest.skip("set OPENAGENTCORE_TEST_POSTGRES_DSN to run the PostgreSQL CLI tests")
    table = f"cli_{secrets.token_hex(5)}"
    PostgresResultStore(dsn, table=table).close()
    yield StoreUnderTest(["--store", dsn, "--table", table], "postgres", dsn=dsn, table=table)
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'DROP TABLE IF EXISTS "public"."{table}"')
        connection.execute(f'DROP TABLE IF EXISTS "public"."{table}_migrations"')


def _leave_in_doubt(store: StoreUnderTest, session_id: str, action: FunctionCallAction) -> CallKey:
    """A runner on another host claimed the call and vanished: its lease ran out."""
    key = CallKey(session_id, action.turn_id, action.call_id)
    opened = store.open()
    try:
        assert opened.claim(
            key,
            function_name=action.name,
            arguments_hash="x",
            owner="another-host:1:ab",
            lease_seconds=0.05,
        ).won
    finally:
        opened.close()
    time.sleep(0.2)
    return key


def _json(argv: list[str], capsys: pytest.CaptureFixture[str], code: int = EXIT_OK) -> object:
    assert main([*argv, "--json"]) == code
    return json.loads(capsys.readouterr().out)


def _record(store: StoreUnderTest, key: CallKey) -> object:
    opened = store.open()
    try:
        return opened.get(key)
    finally:
        opened.close()


def _stored(store: StoreUnderTest, key: CallKey) -> CallRecord:
    record = _record(store, key)
    assert isinstance(record, CallRecord), f"no record of {key.call_id}"
    return record


def _wait_output(client: Client, session_id: str) -> FunctionCallOutputItem:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for item in client.sessions.items.list(session_id, order="asc"):
            if isinstance(item, FunctionCallOutputItem):
                return item
        time.sleep(0.05)
    raise AssertionError("the result never reached the server")


def test_calls_list_in_doubt_shows_a_started_call_whose_owner_is_gone_after_recover(
    setup: Setup, store: StoreUnderTest, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: after a kill -9 and ``recover``, the list showed 0 calls."""
    _, session_id, action, _ = setup
    key = _leave_in_doubt(store, session_id, action)
    assert main(["recover", session_id, *store.args]) == EXIT_ATTENTION
    capsys.readouterr()

    listed = _json(["calls", "list", *store.args, "--state", "in_doubt"], capsys)

    assert isinstance(listed, list)
    assert [(r["call_id"], r["state"], r["in_doubt"]) for r in listed] == [
        (key.call_id, "started", True)
    ]
    assert main(["calls", "list", *store.args, "--state", "in_doubt"]) == EXIT_OK
    text = capsys.readouterr().out
    assert "(in doubt: its owner is gone)" in text
    assert text.rstrip().endswith("1 call(s)")


def _claim_by_a_live_owner(setup: Setup, store: StoreUnderTest) -> CallKey:
    """Claim the Session's pending call for an owner whose lease is far from over."""
    _, session_id, action, _ = setup
    opened = store.open()
    key = CallKey(session_id, action.turn_id, action.call_id)
    opened.claim(key, function_name="refund", arguments_hash="x", owner="h:1:a", lease_seconds=600)
    opened.close()
    return key


def test_calls_list_in_doubt_leaves_out_a_call_still_running(
    setup: Setup, store: StoreUnderTest, capsys: pytest.CaptureFixture[str]
) -> None:
    _claim_by_a_live_owner(setup, store)

    assert _json(["calls", "list", *store.args, "--state", "in_doubt"], capsys) == []
    started = _json(["calls", "list", *store.args, "--state", "started"], capsys)
    assert isinstance(started, list)
    assert [(r["state"], r["in_doubt"]) for r in started] == [("started", False)]


@pytest.mark.parametrize(
    ("option", "settled_by", "status", "shown"),
    [
        (["--output", "refunded by hand"], "manual:output", "completed", "refunded by hand"),
        (["--failed", "refund status unknown"], "manual:failed", "failed", "refund status unknown"),
    ],
    ids=["output", "failed"],
)
def test_calls_resolve_saves_a_result_the_next_recover_submits(
    setup: Setup,
    store: StoreUnderTest,
    capsys: pytest.CaptureFixture[str],
    option: list[str],
    settled_by: str,
    status: str,
    shown: str,
) -> None:
    client, session_id, action, _ = setup
    key = _leave_in_doubt(store, session_id, action)

    resolved = _json(["calls", "resolve", action.call_id, *store.args, *option], capsys)
    assert isinstance(resolved, dict)
    assert resolved["settled_by"] == settled_by
    assert resolved["record"]["state"] == "completed"

    assert main(["recover", session_id, *store.args]) == EXIT_OK
    capsys.readouterr()
    output = _wait_output(client, session_id)
    assert output.call_id == action.call_id
    assert output.status == status
    assert shown in json.dumps(output.model_dump())

    (record,) = _json(["calls", "show", action.call_id, *store.args], capsys)  # type: ignore[misc]
    assert record["settled_by"] == settled_by
    assert record["in_doubt_at"] is not None
    assert record["in_doubt"] is False
    assert record["state"] in ("submitted", "applied")
    stored = _record(store, key)
    assert getattr(stored, "settled_by", None) == settled_by


def _refund_runner(client: Client, store: ResultStore) -> tuple[FunctionRunner, list[str]]:
    """A runner serving ``refund``, which is not idempotent, and the log of its runs."""
    runs: list[str] = []
    runner = FunctionRunner(client, store=store)

    @runner.function(name="refund")
    def refund(order_id: str = "") -> str:
        """Refund an order."""
        runs.append(order_id)
        return "refunded again"

    return runner, runs


def test_calls_resolve_rerun_lets_the_next_runner_run_the_function(
    setup: Setup, store: StoreUnderTest, capsys: pytest.CaptureFixture[str]
) -> None:
    client, session_id, action, _ = setup
    key = _leave_in_doubt(store, session_id, action)

    resolved = _json(["calls", "resolve", action.call_id, *store.args, "--rerun"], capsys)
    assert isinstance(resolved, dict)
    assert resolved["settled_by"] == "manual:rerun"
    assert resolved["record"]["state"] == "in_doubt"
    assert main(["calls", "list", *store.args]) == EXIT_OK
    assert "(in doubt; to run again: manual:rerun)" in capsys.readouterr().out

    runner, runs = _refund_runner(client, store.open())
    with runner:
        report = runner.serve(session_id, timeout=30)
        assert (report.calls_run, report.in_doubt) == (1, [])
        assert runner.serve(session_id, timeout=30).calls_run == 0
    assert len(runs) == 1
    assert _wait_output(client, session_id).status == "completed"
    # The record keeps its history: in doubt once, run again by hand, a second attempt.
    stored = _stored(store, key)
    assert stored.state in (CallState.SUBMITTED, CallState.APPLIED)
    assert (stored.attempts, stored.settled_by) == (2, "manual:rerun")
    assert stored.in_doubt_at is not None


def test_calls_resolve_rerun_prints_what_happens_next(
    setup: Setup, store: StoreUnderTest, capsys: pytest.CaptureFixture[str]
) -> None:
    _, session_id, action, _ = setup
    _leave_in_doubt(store, session_id, action)

    assert main(["calls", "resolve", action.call_id, *store.args, "--rerun"]) == EXIT_OK
    out = capsys.readouterr().out
    assert f"the next runner serving Session {session_id} runs it again" in out


def test_recover_without_the_function_leaves_a_rerun_pending_not_in_doubt(
    setup: Setup, store: StoreUnderTest, capsys: pytest.CaptureFixture[str]
) -> None:
    """A person already decided: ``recover`` (which has no functions) must not report the
    call in doubt again, nor settle it with a failure."""
    _, session_id, action, _ = setup
    key = _leave_in_doubt(store, session_id, action)
    assert main(["calls", "resolve", action.call_id, *store.args, "--rerun"]) == EXIT_OK
    capsys.readouterr()

    report = _json(["recover", session_id, *store.args], capsys)
    assert isinstance(report, dict)
    assert report["in_doubt"] == []
    assert action.call_id in json.dumps(report["left_pending"])
    stored = _stored(store, key)
    assert (stored.state, stored.settled_by) == (CallState.IN_DOUBT, "manual:rerun")


class _ResolvedJustBeforeThePolicySaves(SQLiteResultStore):
    """A person runs ``calls resolve --rerun`` while a runner's in-doubt policy answers:
    the person's write lands first, the policy's failed result right after it."""

    def save_result(
        self, key: CallKey, result: Mapping[str, Any], *, owner: str | None
    ) -> CallRecord:
        if owner is None and result.get("success") is False:
            self.settle_by_hand(key, None, settled_by="manual:rerun")
        return super().save_result(key, result, owner=owner)


def test_a_rerun_by_hand_wins_over_a_policy_answer_that_lands_after_it(
    setup: Setup, tmp_path: Path
) -> None:
    client, session_id, action, _ = setup
    sqlite = StoreUnderTest([], "sqlite", path=tmp_path / "calls.db")
    key = _leave_in_doubt(sqlite, session_id, action)
    runner, runs = _refund_runner(client, _ResolvedJustBeforeThePolicySaves(tmp_path / "calls.db"))
    with runner:
        report = runner.serve(session_id, timeout=30)
    assert len(runs) == 1
    assert report.calls_run == 1
    assert _wait_output(client, session_id).status == "completed"
    stored = _stored(sqlite, key)
    assert stored.result is not None
    assert stored.result["success"] is True
    assert (stored.attempts, stored.settled_by) == (2, "manual:rerun")


def test_a_run_that_ends_after_a_rerun_by_hand_saves_its_result_instead(
    setup: Setup, tmp_path: Path
) -> None:
    """The owner was slow, not gone: its lease ran out, a person cleared the call to run
    again, then the first run saved its result. That result is kept, so nothing runs the
    function a second time."""
    client, session_id, action, _ = setup
    sqlite = StoreUnderTest([], "sqlite", path=tmp_path / "calls.db")
    key = _leave_in_doubt(sqlite, session_id, action)
    assert main(["calls", "resolve", action.call_id, "--store", str(sqlite.path), "--rerun"]) == 0
    opened = sqlite.open()
    result = {
        "type": "agent.session.input.tool_result",
        "turn_id": key.turn_id,
        "call_id": key.call_id,
        "success": True,
        "output": "first run",
    }
    try:
        saved = opened.save_result(key, result, owner="another-host:1:ab")
    finally:
        opened.close()
    assert saved.state is CallState.COMPLETED
    assert saved.settled_by is None  # the first run finished: nobody settled it

    runner, runs = _refund_runner(client, sqlite.open())
    with runner:
        report = runner.serve(session_id, timeout=30)
    assert (runs, report.results_resubmitted) == ([], 1)
    assert "first run" in json.dumps(_wait_output(client, session_id).model_dump())


def _leave_refused(store: StoreUnderTest, session_id: str, action: FunctionCallAction) -> CallKey:
    """A runner saved a result that the server refused (422): the call still waits."""
    key = CallKey(session_id, action.turn_id, action.call_id)
    opened = store.open()
    try:
        opened.claim(
            key, function_name=action.name, arguments_hash="x", owner="h:1:a", lease_seconds=60
        )
        opened.save_result(key, _result(key, "a result the server refused"), owner="h:1:a")
        opened.mark(key, CallState.REJECTED)
    finally:
        opened.close()
    return key


def _result(key: CallKey, output: str) -> dict[str, Any]:
    return {
        "type": "agent.session.input.tool_result",
        "turn_id": key.turn_id,
        "call_id": key.call_id,
        "success": True,
        "output": output,
    }


def test_calls_resolve_answers_a_call_whose_result_the_server_refused(
    setup: Setup, store: StoreUnderTest, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, nothing settled a rejected call: ``resolve`` refused it ("not in doubt")
    and ``prune`` keeps it, so its Turn waited until someone cancelled it. Now the answer
    goes to the server; the record keeps the refused result and is settled."""
    client, session_id, action, _ = setup
    key = _leave_refused(store, session_id, action)

    answered = _json(
        ["calls", "resolve", action.call_id, *store.args, "--failed", "refund needs a person"],
        capsys,
    )

    assert isinstance(answered, dict)
    assert (answered["settled_by"], answered["record"]["state"]) == (
        "manual:failed",
        "abandoned",
    )
    output = _wait_output(client, session_id)
    assert output.status == "failed"
    assert "refund needs a person" in json.dumps(output.model_dump())
    stored = _stored(store, key)
    assert (stored.state, stored.settled_by) == (CallState.ABANDONED, "manual:failed")
    assert stored.result == _result(key, "a result the server refused")  # the evidence


def test_calls_resolve_leaves_a_refused_call_alone_when_the_server_has_an_answer(
    setup: Setup, store: StoreUnderTest, capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker (or a person) answered the call first: the server keeps that answer, and
    the command says so and changes nothing."""
    client, session_id, action, _ = setup
    key = _leave_refused(store, session_id, action)
    client.sessions.events.create(session_id, events=[_result(key, "answered first")])

    code = main(["calls", "resolve", action.call_id, *store.args, "--output", "mine"])

    assert code == EXIT_ATTENTION
    err = capsys.readouterr().err
    assert "already holds a result" in err
    stored = _stored(store, key)
    assert stored.state is CallState.REJECTED


def test_calls_resolve_reports_an_answer_the_server_took_though_a_worker_settled_first(
    setup: Setup,
    store: StoreUnderTest,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between the answer and the record's update, a worker posted the refused result,
    met the answer (409) and settled the record itself: the answer still stands."""
    client, session_id, action, _ = setup
    refused = _leave_refused(store, session_id, action)
    settle = StoreBase.settle_refused_by_hand

    def worker_first(self: StoreBase, key: CallKey, *, settled_by: str) -> CallRecord:
        self.mark(key, CallState.ABANDONED)
        return settle(self, key, settled_by=settled_by)

    monkeypatch.setattr(StoreBase, "settle_refused_by_hand", worker_first)

    assert main(["calls", "resolve", action.call_id, *store.args, "--output", "mine"]) == EXIT_OK

    assert f"Call {action.call_id} answered" in capsys.readouterr().out
    assert "mine" in json.dumps(_wait_output(client, session_id).model_dump())
    stored = _stored(store, refused)
    assert stored.state is CallState.ABANDONED


def test_calls_resolve_never_reruns_a_call_whose_result_the_server_refused(
    setup: Setup, store: StoreUnderTest, capsys: pytest.CaptureFixture[str]
) -> None:
    _, session_id, action, _ = setup
    key = _leave_refused(store, session_id, action)

    assert main(["calls", "resolve", action.call_id, *store.args, "--rerun"]) == EXIT_ATTENTION

    assert "running the function again would not help" in capsys.readouterr().err
    stored = _stored(store, key)
    assert stored.state is CallState.REJECTED


def test_calls_resolve_names_the_running_worker_whose_lease_ran_out(
    setup: Setup, store: StoreUnderTest, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lease ran out, but the worker still runs on this host (a paused process, a
    clock step): the call is not in doubt, and the refusal says what to do instead."""
    _, session_id, action, _ = setup
    owner = new_owner_id()
    owner_opened(owner)  # a runner of this process that is still open
    try:
        opened = store.open()
        key = CallKey(session_id, action.turn_id, action.call_id)
        opened.claim(
            key, function_name="refund", arguments_hash="x", owner=owner, lease_seconds=0.01
        )
        opened.close()
        time.sleep(0.05)

        code = main(["calls", "resolve", action.call_id, *store.args, "--failed", "x"])
    finally:
        owner_closed(owner)

    assert code == EXIT_ATTENTION
    err = capsys.readouterr().err
    assert "still running on this host" in err
    assert _stored(store, key).state is CallState.STARTED


def test_calls_resolve_refuses_a_call_that_is_not_in_doubt(
    setup: Setup, store: StoreUnderTest, capsys: pytest.CaptureFixture[str]
) -> None:
    key = _claim_by_a_live_owner(setup, store)

    assert main(["calls", "resolve", key.call_id, *store.args, "--output", "x"]) == (EXIT_ATTENTION)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "not in doubt" in err
    assert main(["calls", "resolve", "call_unknown", *store.args, "--rerun"]) == EXIT_ATTENTION
    assert "no call call_unknown" in capsys.readouterr().err
    record = _record(store, key)
    assert getattr(record, "state", None) is CallState.STARTED


def test_calls_resolve_needs_exactly_one_outcome(store: StoreUnderTest) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["calls", "resolve", "call_1", *store.args, "--output", "x", "--rerun"])
    assert exited.value.code == 2
    with pytest.raises(SystemExit):
        main(["calls", "resolve", "call_1", *store.args])


# -- recover --agent ------------------------------------------------------------------------


def _agent_sessions(client: Client, count: int) -> tuple[str, list[str]]:
    agent = client.agents.create(model="scripted", tools=[TOOL])
    sessions = [client.sessions.create(agent_id=agent.id, input="go").id for _ in range(count)]
    for session_id in sessions:
        pending_call(client, session_id)
    return agent.id, sessions


def test_recover_agent_walks_every_session_of_the_agent(
    setup: Setup, store: StoreUnderTest, capsys: pytest.CaptureFixture[str]
) -> None:
    client, other_session, _, _ = setup
    agent_id, sessions = _agent_sessions(client, 3)
    # One of them has a saved result waiting to be submitted.
    action = pending_call(client, sessions[1])
    key = _leave_in_doubt(store, sessions[1], action)
    opened = store.open()
    opened.settle_by_hand(  # type: ignore[attr-defined]
        key,
        {
            "type": "agent.session.input.tool_result",
            "turn_id": key.turn_id,
            "call_id": key.call_id,
            "success": True,
            "output": "done",
        },
        settled_by="manual:output",
    )
    opened.close()

    document = _json(["recover", "--agent", agent_id, *store.args], capsys)

    assert isinstance(document, dict)
    assert document["agent_id"] == agent_id
    reports = {report["session_id"]: report for report in document["sessions"]}
    assert set(reports) == set(sessions)
    assert other_session not in reports
    assert reports[sessions[1]]["results_resubmitted"] == 1
    assert [reports[s]["left_pending"] != [] for s in sessions] == [True, False, True]
    assert _wait_output(client, sessions[1]).call_id == key.call_id

    assert main(["recover", "--agent", agent_id, *store.args]) == EXIT_OK
    text = capsys.readouterr().out
    assert all(f"Session {s}:" in text for s in sessions)
    assert f"Agent {agent_id}: 3 Session(s) recovered" in text


def test_recover_takes_a_session_or_an_agent_not_both(store: StoreUnderTest) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["recover", "sess_1", "--agent", "agent_1", *store.args])
    assert exited.value.code == 2
    with pytest.raises(SystemExit):
        main(["recover", *store.args])


def test_recover_agent_shows_progress_on_a_terminal_only(
    setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client, _, _, _ = setup
    agent_id, sessions = _agent_sessions(client, 2)
    path = tmp_path / "progress.db"
    SQLiteResultStore(path).close()
    command = [sys.executable, "-m", "openagentcore.cli", "recover", "--agent", agent_id]
    command += ["--store", str(path)]

    leader, follower = pty.openpty()
    try:
        done = subprocess.run(command, stderr=follower, stdout=subprocess.PIPE, timeout=60)
        os.close(follower)
        terminal = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            terminal += chunk
    finally:
        os.close(leader)
    assert done.returncode == EXIT_OK
    shown = terminal.decode()
    # Newest first, as the server lists them.
    assert f"\rrecovering Session 1 ({sessions[1]})" in shown
    assert f"\rrecovering Session 2 ({sessions[0]})" in shown
    assert "recovering" not in done.stdout.decode()

    piped = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert piped.returncode == EXIT_OK
    assert "recovering" not in piped.stderr
    assert f"Agent {agent_id}: 2 Session(s) recovered" in piped.stdout
