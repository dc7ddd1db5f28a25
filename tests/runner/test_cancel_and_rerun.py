"""Cancelled Turns, capped reruns and results that lose a race, on both runners over
loopback HTTP against the emulator (through a proxy on loopback where the stream must
drop at a chosen moment):

- a Turn cancelled while the runner's stream is down stops its calls once the runner
  learns of it from a Session read;
- ``InDoubtDecision.rerun()`` from ``on_in_doubt`` is capped by ``max_attempts``;
- a result for a Turn the runner knows was cancelled is kept, not posted;
- a result that loses to another worker's verdict is kept as ``late_outcome``, and one
  saved after another worker's in-doubt mark is labelled as the run's own.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from openagentcore import CallContext, Client
from openagentcore.cli import EXIT_OK, main
from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript
from openagentcore.runner import IN_DOUBT_ERROR, InDoubtCall, InDoubtDecision, TurnResult
from openagentcore.runner._results import failure_event
from openagentcore.store import (
    CallKey,
    CallState,
    MemoryResultStore,
    SQLiteResultStore,
    arguments_hash,
)
from openagentcore.types import InputCancelEvent, InputMessageEvent

from ._hostile import HostileProxy, api_error
from ._support import PAIRED, CallLog, Flavour, Harness, applied_calls, flavoured, one_turn

MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]

RUNNER_COMBINATIONS = PAIRED

#: A worker on another host: only its lease tells whether it is still running.
REMOTE_OWNER = "another-host:4242:feedface0000"


@dataclass(frozen=True)
class _Upstream:
    """What :class:`Harness` needs of a server: where it is and its key."""

    base_url: str
    api_key: str


class _StreamSwitch:
    """Takes the runner's event stream down and up through a proxy: while down, open
    streams are cut at their next comment or event line (the emulator sends a keepalive
    every 0.2 s) and new ones are refused with 503. Reads and posts pass through all
    along: an empty body is the answer to a POST (202), not a stream's blank line."""

    def __init__(self, proxy: HostileProxy) -> None:
        self.down = threading.Event()
        self.cut = threading.Event()
        proxy.rule = self._rule
        proxy.rewrite = self._rewrite

    def _rule(self, method: str, path: str, body: bytes) -> Any:
        if self.down.is_set() and method == "GET" and path.endswith("/events"):
            return api_error(503, "service_unavailable", "Stream down for the test.", "api_error")
        return None

    def _rewrite(self, data: bytes) -> bytes:
        if self.down.is_set() and data.startswith((b":", b"event:", b"data:")):
            self.cut.set()
            raise ConnectionResetError("the test cuts the stream")
        return data


@pytest.fixture
def proxy(make_core: MakeCore) -> Iterator[Callable[[LocalCore], HostileProxy]]:
    proxies: list[HostileProxy] = []

    def make(core: LocalCore) -> HostileProxy:
        started = HostileProxy(core.base_url).start()
        proxies.append(started)
        return started

    yield make
    for started in proxies:
        started.stop()


def _wait_until(condition: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _turn_status(harness: Harness, session_id: str) -> str:
    (turn,) = harness.client.sessions.turns.list(session_id).data
    return turn.status


# -- 1. a Turn cancelled while the stream is down -------------------------------------


def test_a_turn_cancelled_while_the_stream_is_down_stops_its_calls(
    make_core: MakeCore,
    make_harness: MakeHarness,
    proxy: Callable[[LocalCore], HostileProxy],
    flavour: Flavour,
) -> None:
    """Three calls of a ``max_concurrency=1`` function. While the first runs, the
    runner's stream goes down; the user cancels the Turn; the stream comes back. The
    cancel event was never streamed to the runner, but its reconnect reads the Session:
    idle, nothing pending. The running function must be asked to stop, and the two calls
    queued behind it must never start (their claims given back)."""
    core = make_core(scenario=one_turn([FunctionCall("ship", {"n": n}) for n in range(3)]))
    switch = _StreamSwitch(via := proxy(core))
    store = MemoryResultStore()
    harness = make_harness(
        cast("LocalCore", _Upstream(via.base_url, core.api_key)),
        store=store,
        max_concurrency=1,
    )
    session: dict[str, str] = {}
    ran: list[int] = []
    saw_cancel = threading.Event()

    def blip_and_cancel() -> None:
        """Take the stream down, cancel the Turn (straight to the emulator), bring the
        stream back."""
        switch.down.set()
        assert switch.cut.wait(10), "the stream was never cut"
        with Client(api_key=core.api_key, base_url=core.base_url) as direct:
            direct.sessions.events.create(session["id"], events=[InputCancelEvent()])
            _wait_until(
                lambda: direct.sessions.turns.list(session["id"]).data[0].status == "cancelled",
                "the cancel",
            )
        switch.down.clear()

    if flavour == "def":

        @harness.runner.function
        def ship(n: int, ctx: CallContext) -> str:
            """Ship an order. The first call sees its Turn cancelled."""
            ran.append(n)
            if len(ran) == 1:
                blip_and_cancel()
                if ctx.cancelled.wait(15):
                    saw_cancel.set()
                    return "stopped"
            return f"shipped {n}"

    else:

        @harness.runner.function
        async def ship(n: int) -> str:
            """Ship an order. The first call sees its Turn cancelled."""
            ran.append(n)
            if len(ran) == 1:
                try:
                    await asyncio.to_thread(blip_and_cancel)
                    await asyncio.sleep(15)
                except asyncio.CancelledError:
                    saw_cancel.set()
                    raise
            return f"shipped {n}"

    session["id"] = session_id = harness.create_session()
    pending = harness.wait_for_pending(session_id)
    report = harness.serve(session_id, timeout=40)

    assert saw_cancel.is_set(), "the running function never learned its Turn was cancelled"
    assert ran == [0], f"calls of the cancelled Turn started after it ended: {ran}"
    assert report.final_status == "idle"
    assert report.reconnects >= 1
    never_ran = [CallKey(session_id, a.turn_id, a.call_id) for a in pending[1:]]
    assert [store.get(key) for key in never_ran] == [None, None], "claims not given back"


class _CancelledRunTurn:
    """``run_turn``'s Turn makes one call, ``ship``, which takes the runner's stream
    down, cancels the Turn (straight to the emulator), starts the next Turn (it waits on
    ``approve``, a function this runner does not serve), brings the stream back, runs
    :attr:`after_blip`, then waits ``wait`` seconds to be cancelled."""

    def __init__(
        self,
        make_core: MakeCore,
        make_harness: MakeHarness,
        proxy: Callable[[LocalCore], HostileProxy],
        flavour: Flavour,
        *,
        wait: float = 15,
    ) -> None:
        turns = [
            TurnScript(answer="hello"),
            TurnScript(steps=[(FunctionCall("ship", {"n": 0}),)]),
            TurnScript(steps=[(FunctionCall("approve", {}),)]),
        ]
        self.core = make_core(scenario=Scenario(turns=turns))
        self.proxy = proxy(self.core)
        self.switch = _StreamSwitch(self.proxy)
        upstream = _Upstream(self.proxy.base_url, self.core.api_key)
        self.harness = make_harness(cast("LocalCore", upstream))
        self.session_id = ""
        self.after_blip: Callable[[], None] = lambda: None
        #: Set once the stream is back up and ``after_blip`` returned.
        self.blipped = threading.Event()
        self.saw_cancel = threading.Event()
        if flavour == "def":

            @self.harness.runner.function
            def ship(n: int, ctx: CallContext) -> str:
                """Ship an order; its Turn is cancelled meanwhile."""
                self._blip_cancel_and_go_on()
                if ctx.cancelled.wait(wait):
                    self.saw_cancel.set()
                    return "stopped"
                return "shipped"

        else:

            @self.harness.runner.function
            async def ship(n: int) -> str:
                """Ship an order; its Turn is cancelled meanwhile."""
                try:
                    await asyncio.to_thread(self._blip_cancel_and_go_on)
                    await asyncio.sleep(wait)
                except asyncio.CancelledError:
                    self.saw_cancel.set()
                    raise
                return "shipped"

    def _blip_cancel_and_go_on(self) -> None:
        self.switch.down.set()
        assert self.switch.cut.wait(10), "the stream was never cut"
        with Client(api_key=self.core.api_key, base_url=self.core.base_url) as direct:
            sessions, session_id = direct.sessions, self.session_id
            sessions.events.create(session_id, events=[InputCancelEvent()])
            _wait_until(lambda: sessions.retrieve(session_id).status == "idle", "the cancel")
            sessions.events.create(session_id, events=[InputMessageEvent.from_text("next")])
            _wait_until(
                lambda: sessions.retrieve(session_id).status == "requires_action",
                "the next Turn to ask for approval",
            )
        self.switch.down.clear()
        self.after_blip()
        self.blipped.set()

    def run_turn(self) -> TurnResult:
        client = self.harness.client
        self.session_id = self.harness.create_session("hi")  # its first Turn only answers
        _wait_until(lambda: client.sessions.retrieve(self.session_id).status == "idle", "hi")
        return self.harness.run_turn(self.session_id, "go", timeout=40)


def test_run_turn_learns_its_turn_was_cancelled_from_reading_it(
    make_core: MakeCore,
    make_harness: MakeHarness,
    proxy: Callable[[LocalCore], HostileProxy],
    flavour: Flavour,
) -> None:
    """``run_turn``'s Turn is cancelled while the stream is down, and by the time it
    comes back the user has started another Turn, which waits on a function this runner
    does not serve: the Session read on reconnect is busy, not idle, so only the read of
    ``run_turn``'s own Turn shows the cancel. The running function must be stopped."""
    rig = _CancelledRunTurn(make_core, make_harness, proxy, flavour)

    result = rig.run_turn()

    assert rig.saw_cancel.is_set(), "the running function never learned its Turn was cancelled"
    assert result.status == "cancelled"


def test_run_turn_reads_its_turn_when_the_stream_dropped_before_its_input_was_answered(
    make_core: MakeCore,
    make_harness: MakeHarness,
    proxy: Callable[[LocalCore], HostileProxy],
    flavour: Flavour,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``run_turn``'s input starts its Turn, whose call runs, but the answer to the
    input's POST comes back late (a slow network, a 5xx retried). Meanwhile the stream
    drops, the Turn is cancelled, the user starts another Turn, the stream comes back and
    the runner reads the Session: busy with the other Turn, and the read could not ask
    for ``run_turn``'s Turn, which had no name yet. Once the POST returns and names the
    Turn, only a read of it shows the cancel: the running function must be stopped, not
    left to run to its end. (The test above failed 1 run in 10 on the sync runner this
    way: its stream switch turned the POST's empty 202 into a 500, so the input was
    retried across the blip.)"""
    rig = _CancelledRunTurn(make_core, make_harness, proxy, flavour, wait=10)
    stream_back = threading.Event()
    read_after_reconnect = threading.Event()
    answer_input = threading.Event()
    forward = rig.proxy.rule

    def watch_reads(method: str, path: str, body: bytes) -> Any:
        if stream_back.is_set() and method == "GET" and path.endswith(f"/{rig.session_id}"):
            read_after_reconnect.set()
        return forward(method, path, body)

    def let_the_answer_through_after_the_read() -> None:
        stream_back.set()  # the stream is up again: its reconnect reads the Session
        try:
            assert read_after_reconnect.wait(20), "no read after the reconnect"
        finally:
            answer_input.set()

    rig.proxy.rule = watch_reads
    rig.after_blip = let_the_answer_through_after_the_read
    events = rig.harness.runner.client.sessions.events
    create = events.create

    def is_input(kwargs: dict[str, Any]) -> bool:
        return any(isinstance(event, InputMessageEvent) for event in kwargs["events"])

    def answered_late(*args: Any, **kwargs: Any) -> None:
        create(*args, **kwargs)
        if is_input(kwargs):
            answer_input.wait(30)

    async def answered_late_async(*args: Any, **kwargs: Any) -> None:
        await create(*args, **kwargs)
        if is_input(kwargs):
            await asyncio.to_thread(answer_input.wait, 30)

    late = answered_late if rig.harness.kind == "sync" else answered_late_async
    monkeypatch.setattr(events, "create", late)

    result = rig.run_turn()

    if not rig.blipped.is_set():  # pytest.fail: not the AssertionError expected to fail
        pytest.fail("the interleaving under test did not happen (see the log)")
    assert rig.saw_cancel.is_set(), "the running function never learned its Turn was cancelled"
    assert result.status == "cancelled"


# -- 2. on_in_doubt's rerun is capped by max_attempts ---------------------------------


def _seed_attempts(store: MemoryResultStore, key: CallKey, attempts: int) -> None:
    """Leave ``key`` as a worker elsewhere would after running it ``attempts`` times and
    vanishing: started, no result, its lease lapsed."""
    store.claim(
        key,
        function_name="charge",
        arguments_hash=arguments_hash({"order": "o1"}),
        owner=REMOTE_OWNER,
        lease_seconds=0.001,
    )
    for seen in range(1, attempts):
        store.take_over(key, owner=REMOTE_OWNER, lease_seconds=0.001, expected_attempts=seen)
    record = store.get(key)
    assert record is not None
    assert record.attempts == attempts
    _wait_until(lambda: store.is_stale(record), "the lease to lapse")


def test_on_in_doubt_rerun_is_capped_by_max_attempts(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A call already run ``max_attempts`` (3) times by workers that vanished; the hook
    answers ``rerun()`` to everything. The function must not run a fourth time: the
    model gets the in-doubt failure, and the log says it was capped."""
    store = MemoryResultStore()
    asked: list[InDoubtCall] = []

    def always_rerun(call: InDoubtCall) -> InDoubtDecision:
        asked.append(call)
        return InDoubtDecision.rerun()

    harness = make_harness(
        make_core(scenario=one_turn([FunctionCall("charge", {"order": "o1"})])),
        store=store,
        on_in_doubt=always_rerun,
    )
    runs = CallLog()

    def charge(order: str) -> str:
        """Charge an order."""
        runs.enter("charge", order)
        runs.leave()
        return f"charged {order}"

    harness.runner.function(flavoured(charge, flavour))
    session_id = harness.create_session()
    (action,) = harness.wait_for_pending(session_id)
    key = CallKey(session_id, action.turn_id, action.call_id)
    _seed_attempts(store, key, 3)

    with caplog.at_level(logging.WARNING, logger="openagentcore.runner"):
        report = harness.serve(session_id, timeout=20)

    assert runs.runs == [], "the hook's rerun ran the function past max_attempts"
    assert [call.attempts for call in asked] == [3]
    output = applied_calls(harness.client, session_id)[action.call_id].output
    assert output is not None
    assert (output.status, output.error) == ("failed", IN_DOUBT_ERROR)
    assert report.in_doubt == [key]
    assert any(
        action.call_id in r.getMessage() and "max_attempts" in r.getMessage()
        for r in caplog.records
    ), "no log line says why the rerun was refused"


def test_a_function_that_ends_its_worker_is_rerun_by_the_hook_at_most_max_attempts_times(
    make_core: MakeCore,
) -> None:
    """Sync runner only (on the async runner a ``SystemExit`` ends the event loop): a
    function that exits its worker thread every time, with a hook that always answers
    ``rerun()``, ran thousands of times in one serve. It runs ``max_attempts`` times."""
    store = MemoryResultStore()
    harness = Harness(
        make_core(scenario=one_turn([FunctionCall("charge", {"order": "o1"})])),
        "sync",
        store=store,
        on_in_doubt=lambda call: InDoubtDecision.rerun(),
    )
    runs = CallLog()
    try:

        @harness.runner.function(max_attempts=3)
        def charge(order: str) -> str:
            """Charge an order; the worker dies every time."""
            runs.enter("charge", order)
            runs.leave()
            raise SystemExit("the function ended its worker")

        session_id = harness.create_session()
        report = harness.serve(session_id, timeout=20)
        (applied,) = applied_calls(harness.client, session_id).values()
    finally:
        harness.close()

    assert len(runs.runs) == 3
    assert applied.output is not None
    assert (applied.output.status, applied.output.error) == ("failed", IN_DOUBT_ERROR)
    assert report.final_status == "idle"


# -- 3. a result for a cancelled Turn is kept, not posted -----------------------------


def test_a_result_for_a_cancelled_turn_is_kept_but_not_posted(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    """The Turn is cancelled while its function runs, and the runner sees it on its
    stream. The function stops and ends with a result: it is saved, but the Turn takes
    no result any more, so it is not posted (the server would answer 409); the record
    ends ``abandoned`` and the report lists the call."""
    store = MemoryResultStore()
    harness = make_harness(
        make_core(scenario=one_turn([FunctionCall("ship", {"n": 0})])), store=store
    )
    session: dict[str, str] = {}

    def cancel_turn() -> None:
        harness.client.sessions.events.create(session["id"], events=[InputCancelEvent()])

    if flavour == "def":

        @harness.runner.function
        def ship(n: int, ctx: CallContext) -> str:
            """Ship an order; its Turn is cancelled meanwhile."""
            cancel_turn()
            assert ctx.cancelled.wait(15), "never told of the cancel"
            return "stopped"

    else:

        @harness.runner.function
        async def ship(n: int) -> str:
            """Ship an order; its Turn is cancelled meanwhile."""
            await asyncio.to_thread(cancel_turn)
            await asyncio.sleep(15)
            return "never cancelled"

    session["id"] = session_id = harness.create_session()
    (action,) = harness.wait_for_pending(session_id)
    key = CallKey(session_id, action.turn_id, action.call_id)
    report = harness.serve(session_id, timeout=30)

    assert _turn_status(harness, session_id) == "cancelled"
    assert harness.statuses("POST", "/events") == [], "a result was posted to a cancelled Turn"
    record = store.get(key)
    assert record is not None
    assert record.result is not None, "the result was not kept"
    assert record.state is CallState.ABANDONED
    assert report.abandoned == [key]


# -- 4. a result that loses to another worker's verdict -------------------------------


@pytest.fixture
def shared_store(tmp_path: Path) -> Iterator[tuple[SQLiteResultStore, SQLiteResultStore]]:
    """One SQLite file opened twice: the runner's store and another worker's."""
    path = tmp_path / "calls.db"
    mine, theirs = SQLiteResultStore(path), SQLiteResultStore(path)
    yield mine, theirs
    mine.close()
    theirs.close()


def _held_function(harness: Harness, flavour: Flavour, release: threading.Event) -> threading.Event:
    """``charge`` runs until ``release`` is set, then succeeds; returns "it started"."""
    started = threading.Event()

    if flavour == "def":

        @harness.runner.function
        def charge(order: str) -> str:
            """Charge an order."""
            started.set()
            assert release.wait(20)
            return f"charged {order}"

    else:

        @harness.runner.function
        async def charge(order: str) -> str:
            """Charge an order."""
            started.set()
            assert await asyncio.to_thread(release.wait, 20)
            return f"charged {order}"

    return started


def _serve_racing(
    harness: Harness, flavour: Flavour, other_worker: Callable[[CallKey], None]
) -> tuple[str, CallKey, Any]:
    """Serve the Session in a thread; once ``charge`` runs, ``other_worker`` acts on
    its call, then the function is released."""
    release = threading.Event()
    started = _held_function(harness, flavour, release)
    session_id = harness.create_session()
    (action,) = harness.wait_for_pending(session_id)
    key = CallKey(session_id, action.turn_id, action.call_id)
    outcome: dict[str, Any] = {}

    def serve() -> None:
        outcome["report"] = harness.serve(session_id, timeout=30)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        assert started.wait(20), "the function never started"
        other_worker(key)
    finally:
        release.set()
        thread.join(40)
    return session_id, key, outcome.get("report")


def test_a_result_that_loses_to_another_workers_verdict_is_kept_as_late_outcome(
    make_core: MakeCore,
    make_harness: MakeHarness,
    shared_store: tuple[SQLiteResultStore, SQLiteResultStore],
    flavour: Flavour,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """While ``charge`` runs, another worker (sharing the SQLite store) judges the call
    in doubt and saves its policy's failure. The function then succeeds: the first saved
    result stands and is what the model gets, and the success must not vanish: it is
    kept as ``late_outcome``, with a WARNING naming the call."""
    mine, theirs = shared_store
    shared_path = tmp_path / "calls.db"
    harness = make_harness(
        make_core(scenario=one_turn([FunctionCall("charge", {"order": "o1"})])), store=mine
    )

    def settle_elsewhere(key: CallKey) -> None:
        theirs.mark(key, CallState.IN_DOUBT)
        theirs.save_result(key, failure_event(key, IN_DOUBT_ERROR), owner=None)

    with caplog.at_level(logging.WARNING, logger="openagentcore.runner"):
        session_id, key, report = _serve_racing(harness, flavour, settle_elsewhere)

    assert report is not None
    assert report.final_status == "idle"
    output = applied_calls(harness.client, session_id)[key.call_id].output
    assert output is not None
    assert (output.status, output.error) == ("failed", IN_DOUBT_ERROR)
    record = theirs.get(key)
    assert record is not None
    assert record.settled_by == "failed"
    assert record.late_outcome is not None, "the function's result was dropped"
    assert (record.late_outcome["success"], record.late_outcome["output"]) == (True, "charged o1")
    assert any(
        key.call_id in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records
    ), "no WARNING names the call whose result lost"
    assert main(["calls", "list", "--store", str(shared_path)]) == EXIT_OK
    (line,) = [line for line in capsys.readouterr().out.splitlines() if key.call_id in line]
    assert "finished after another worker settled it: succeeded" in line


def test_a_result_saved_after_another_workers_in_doubt_mark_is_not_labelled_a_policy_answer(
    make_core: MakeCore,
    make_harness: MakeHarness,
    shared_store: tuple[SQLiteResultStore, SQLiteResultStore],
    flavour: Flavour,
) -> None:
    """While ``charge`` runs, another worker marks its call in doubt (and has not
    decided yet). The function then succeeds and its result is saved first: it is the
    run's own result, not an ``on_in_doubt`` answer, so ``settled_by`` is
    ``finished``, not ``result``."""
    mine, theirs = shared_store
    harness = make_harness(
        make_core(scenario=one_turn([FunctionCall("charge", {"order": "o1"})])), store=mine
    )

    session_id, key, report = _serve_racing(
        harness, flavour, lambda key: theirs.mark(key, CallState.IN_DOUBT)
    )

    assert report is not None
    assert report.final_status == "idle"
    output = applied_calls(harness.client, session_id)[key.call_id].output
    assert output is not None
    assert output.status == "completed"
    record = theirs.get(key)
    assert record is not None
    assert record.result is not None
    assert record.settled_by == "finished"
