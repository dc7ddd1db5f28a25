"""End-to-end regressions for the twelve runner defects of issue 11.

Each test is named after the defect it pins (``test_defect_NN_...``) and runs real
runners against ``LocalCore`` over loopback HTTP, or against a small hostile proxy on
loopback where the emulator cannot produce the answer needed. Every one failed on the
runner before core v2 (commit 56bc64f).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest

from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript
from openagentcore.runner import IN_DOUBT_ERROR, InDoubtCall, InDoubtDecision
from openagentcore.store import (
    CallKey,
    CallState,
    MemoryResultStore,
    SQLiteResultStore,
    StoreUnavailableError,
    arguments_hash,
)

from ._hostile import HostileProxy, api_error, is_result_post, replace_arguments
from ._support import PAIRED, CallLog, Flavour, Harness, applied_calls, flavoured, one_turn

MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]

RUNNER_COMBINATIONS = PAIRED


@dataclass(frozen=True)
class _Upstream:
    """What :class:`Harness` needs of a server: where it is and its key."""

    base_url: str
    api_key: str


def _via(proxy: HostileProxy, api_key: str) -> LocalCore:
    """The proxy in the place of a LocalCore: Harness only reads these two attributes."""
    return cast("LocalCore", _Upstream(proxy.base_url, api_key))


#: A worker on another host: only its lease tells whether it is still running.
REMOTE_OWNER = "another-host:4242:feedface0000"

ProxiedHarness = Callable[..., tuple[Harness, HostileProxy]]


@pytest.fixture
def proxied(
    make_harness: MakeHarness,
) -> Iterator[ProxiedHarness]:
    """A harness whose runner and client talk to ``core`` through a hostile proxy."""
    proxies: list[HostileProxy] = []

    def make(core: LocalCore, **options: Any) -> tuple[Harness, HostileProxy]:
        proxy = HostileProxy(core.base_url).start()
        proxies.append(proxy)
        harness = make_harness(_via(proxy, core.api_key), **options)
        return harness, proxy

    yield make
    for proxy in proxies:
        proxy.stop()


def _counted_charge(runs: CallLog) -> Callable[[str], str]:
    """``charge``: an effect that must not run twice; ``runs`` logs every run."""

    def charge(order: str) -> str:
        """Charge an order."""
        runs.enter("charge", order)
        runs.leave()
        return f"charged {order}"

    return charge


def _refuse_results(proxy: HostileProxy) -> None:
    """The proxy answers every result POST with 422, as if the server refused it."""
    proxy.rule = lambda method, path, body: (
        api_error(422, "invalid_value", "The result is not acceptable.")
        if is_result_post(method, path, body)
        else None
    )


def _wait_until(condition: Callable[[], bool], timeout: float = 20, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _output_of(harness: Harness, session_id: str, call_id: str) -> Any:
    applied = applied_calls(harness.client, session_id)[call_id]
    assert applied.output is not None, f"no output was applied for {call_id}"
    return applied.output


# -- defect 4: stop() is per serve, not sticky ---------------------------------------


def test_defect_04_run_turn_after_a_stopped_forever_serve_serves_normally(
    make_core: MakeCore, make_harness: MakeHarness
) -> None:
    turn = TurnScript(steps=[(FunctionCall("add", {"a": 1, "b": 2}),)], answer="sum {summary}")
    harness = make_harness(make_core(scenario=Scenario(turns=[turn, turn])))
    log = CallLog()

    @harness.runner.function
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        log.enter("add", (a, b))
        log.leave()
        return a + b

    session_id = harness.create_session()
    reports: list[Any] = []
    daemon = threading.Thread(
        target=lambda: reports.append(harness.serve(session_id, timeout=60, until="forever"))
    )
    daemon.start()
    _wait_until(lambda: len(log.runs) == 1, what="the first Turn's call")
    _wait_until(
        lambda: harness.client.sessions.retrieve(session_id).status == "idle",
        what="the first Turn to end",
    )
    if harness.kind == "sync":
        harness.runner.stop()
    else:
        harness.portal.call(lambda: harness.runner.stop())
    daemon.join(30)
    assert not daemon.is_alive()
    assert len(reports) == 1

    result = harness.run_turn(session_id, "again", timeout=30)

    assert result.report.calls_run == 1
    assert result.text is not None
    assert "3" in result.text
    assert len(log.runs) == 2


# -- defect 8: on_in_doubt raising ---------------------------------------------------


def test_defect_08_on_in_doubt_raising_falls_back_to_outcome_unknown(
    make_core: MakeCore, make_harness: MakeHarness, caplog: pytest.LogCaptureFixture
) -> None:
    def broken_policy(call: InDoubtCall) -> InDoubtDecision:
        raise RuntimeError("policy bug")

    harness = make_harness(
        make_core(scenario=one_turn([FunctionCall("charge", {"order": "o1"})])),
        on_in_doubt=broken_policy,
    )
    runs = CallLog()
    harness.runner.function(_counted_charge(runs))

    session_id = harness.create_session()
    (action,) = harness.wait_for_pending(session_id)
    key = CallKey(session_id, action.turn_id, action.call_id)
    claim = harness.runner.store.claim(
        key,
        function_name=action.name,
        arguments_hash=arguments_hash(action.arguments),
        owner="another-host:4242:feedface0000",
        lease_seconds=0.001,
    )
    assert claim.won
    time.sleep(0.05)

    with caplog.at_level("ERROR"):
        report = harness.serve(session_id, timeout=30)

    assert report.in_doubt == [key]
    assert runs.runs == []
    output = _output_of(harness, session_id, key.call_id)
    assert output.status == "failed"
    assert output.error == IN_DOUBT_ERROR
    assert "policy bug" in caplog.text


# -- defect 11: hostile arguments and results ----------------------------------------


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"d": value}
    return value


LONE_SURROGATE_ARGUMENTS = '{"text":"\\ud800"}'
DEEP_ARGUMENTS = '{"text":' + "[" * 1_000 + "]" * 1_000 + "}"


def _serve_hostile_arguments(
    make_core: MakeCore, proxied: ProxiedHarness, tmp_path: Any, arguments_json: str
) -> tuple[Harness, HostileProxy, CallLog, str, str]:
    """Serve one call whose arguments arrive as a JSON string (as real servers send
    them) holding ``arguments_json``; returns after a restart served it again."""
    placeholder = {"text": "PLACEHOLDER"}
    store_path = tmp_path / "calls.db"
    harness, proxy = proxied(
        make_core(scenario=one_turn([FunctionCall("echo", placeholder)])),
        store=SQLiteResultStore(store_path),
    )
    proxy.rewrite = replace_arguments(placeholder, arguments_json)
    runs = CallLog()

    def echo(text: Any) -> str:
        """Echo a text."""
        runs.enter("echo", None)
        runs.leave()
        return f"echoed {text}"

    harness.runner.function(echo)
    session_id = harness.create_session()
    (action,) = harness.wait_for_pending(session_id)

    harness.serve(session_id, timeout=10)

    # A restart on the same store does not crash on the same call either.
    again = Harness(
        _via(proxy, proxy_key(harness)),
        harness.kind,
        store=SQLiteResultStore(store_path),
    )
    try:
        again.runner.function(echo)
        again.recover(session_id)
    finally:
        again.close()
    return harness, proxy, runs, session_id, action.call_id


def proxy_key(harness: Harness) -> str:
    return harness.runner_api_key


def test_defect_11_lone_surrogate_in_arguments_never_crashes_serve_or_restart(
    make_core: MakeCore, proxied: ProxiedHarness, tmp_path: Any
) -> None:
    harness, _, runs, session_id, call_id = _serve_hostile_arguments(
        make_core, proxied, tmp_path, LONE_SURROGATE_ARGUMENTS
    )
    _output_of(harness, session_id, call_id)  # the model got an answer
    assert len(runs.runs) <= 1


@pytest.mark.parametrize(
    "arguments_json",
    [LONE_SURROGATE_ARGUMENTS, DEEP_ARGUMENTS],
    ids=["lone-surrogate", "nested-1000-deep"],
)
def test_defect_11_hostile_arguments_get_a_failed_result_without_running(
    make_core: MakeCore, proxied: ProxiedHarness, tmp_path: Any, arguments_json: str
) -> None:
    harness, _, runs, session_id, call_id = _serve_hostile_arguments(
        make_core, proxied, tmp_path, arguments_json
    )
    output = _output_of(harness, session_id, call_id)
    assert output.status == "failed"
    assert output.error is not None
    assert "Invalid arguments" in output.error
    assert runs.runs == []


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(math.nan, id="nan"),
        pytest.param("half a pair \ud800", id="lone-surrogate-result"),
    ],
)
def test_defect_11_a_result_that_cannot_be_encoded_gives_a_failed_result(
    make_core: MakeCore, make_harness: MakeHarness, tmp_path: Any, value: Any
) -> None:
    core = make_core(scenario=one_turn([FunctionCall("measure", {"x": 1})]))
    store_path = tmp_path / "calls.db"
    harness = make_harness(core, store=SQLiteResultStore(store_path))
    runs = CallLog()

    @harness.runner.function
    def measure(x: int) -> Any:
        """Measure something."""
        runs.enter("measure", x)
        runs.leave()
        return {"value": value}

    session_id = harness.create_session()
    (action,) = harness.wait_for_pending(session_id)

    harness.serve(session_id, timeout=30)

    output = _output_of(harness, session_id, action.call_id)
    assert output.status == "failed"
    assert len(runs.runs) == 1

    again = Harness(core, harness.kind, store=SQLiteResultStore(store_path))
    try:
        again.runner.function(measure)
        again.recover(session_id)
    finally:
        again.close()
    assert len(runs.runs) == 1


# -- defect 2: a serve that ends early does not orphan running functions --------------


def test_defect_02_serve_timeout_saves_and_posts_the_running_functions_result(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    harness = make_harness(
        make_core(scenario=one_turn([FunctionCall("slow", {"x": 1})])), shutdown_grace=30
    )
    runs = CallLog()
    release = threading.Event()

    def slow(x: int) -> str:
        """Work slowly."""
        runs.enter("slow", x)
        release.wait(30)
        runs.leave()
        return "done"

    harness.runner.function(flavoured(slow, flavour))
    session_id = harness.create_session()
    (action,) = harness.wait_for_pending(session_id)
    key = CallKey(session_id, action.turn_id, action.call_id)
    threading.Timer(1.5, release.set).start()

    with pytest.raises(TimeoutError) as raised:
        harness.serve(session_id, timeout=0.5)

    assert raised.value.report.session_id == session_id  # type: ignore[attr-defined]
    release.set()
    _wait_until(
        lambda: (
            (r := harness.runner.store.get(key)) is not None
            and r.state in (CallState.SUBMITTED, CallState.APPLIED)
        ),
        what="the result to be posted after the timeout",
    )
    output = _output_of(harness, session_id, key.call_id)
    assert output.status == "completed"
    # A later serve neither times out on that call nor reports it in doubt.
    report = harness.serve(session_id, timeout=30)
    assert report.in_doubt == []
    assert len(runs.runs) == 1


def test_defect_02_a_claim_never_started_is_released_when_serve_times_out(
    make_core: MakeCore, make_harness: MakeHarness
) -> None:
    """With one slot busy, the second call is claimed but waits to run; when the serve
    times out, its claim is given back so another runner runs it exactly once."""
    core = make_core(
        scenario=one_turn([FunctionCall("slow", {"x": 1}), FunctionCall("slow", {"x": 2})])
    )
    store = MemoryResultStore()
    harness = make_harness(core, store=store, max_concurrency=1, shutdown_grace=0)
    runs = CallLog()
    release = threading.Event()

    @harness.runner.function
    def slow(x: int) -> str:
        """Work slowly."""
        runs.enter("slow", x)
        if x == 1:
            release.wait(30)
        runs.leave()
        return f"done {x}"

    session_id = harness.create_session()
    _wait_until(lambda: len(harness.wait_for_pending(session_id)) == 2, what="both calls")
    keys = [CallKey(session_id, a.turn_id, a.call_id) for a in harness.wait_for_pending(session_id)]
    with pytest.raises(TimeoutError):
        harness.serve(session_id, timeout=4)

    assert len(runs.runs) == 1

    def kept() -> list[CallKey]:
        return [key for key in keys if store.get(key) is not None]

    # The release is one store write after the serve ended: give it time under load.
    _wait_until(lambda: len(kept()) == 1, timeout=10, what="the unstarted claim's release")
    release.set()
    (running,) = kept()
    _wait_until(lambda: (r := store.get(running)) is not None and r.result is not None)

    # Another runner on the same store runs the released call, once.
    other = Harness(harness.core, harness.kind, store=store)
    try:
        other.runner.function(slow)
        other.serve(session_id, timeout=30)
    finally:
        other.close()
    assert sorted(x for _, x in runs.runs) == [1, 2]


# -- defect 1: a failed batch after a restart is retried, never a crash ----------------


def test_defect_01_failed_batch_after_restart_is_retried_not_a_crash(
    make_core: MakeCore, proxied: ProxiedHarness, tmp_path: Any
) -> None:
    core = make_core(
        scenario=one_turn(
            [FunctionCall("add", {"a": 1, "b": 2}), FunctionCall("add", {"a": 3, "b": 4})]
        )
    )
    store_path = tmp_path / "calls.db"
    observer, proxy = proxied(core)
    runs = CallLog()

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        runs.enter("add", (a, b))
        runs.leave()
        return a + b

    def runner() -> Harness:
        harness = Harness(
            _via(proxy, observer.runner_api_key),
            observer.kind,
            store=SQLiteResultStore(store_path),
            shutdown_grace=0.5,
        )
        harness.runner.function(add)
        return harness

    first = runner()
    session_id = first.create_session()
    _wait_until(lambda: len(first.wait_for_pending(session_id)) == 2, what="both calls")
    outage = threading.Event()
    outage.set()

    def down(method: str, path: str, body: bytes) -> Any:
        if outage.is_set() and is_result_post(method, path, body):
            return api_error(503, "server_error", "Try again later.", type="server_error")
        return None

    proxy.rule = down
    # The first runner saves both results but cannot post them; then it goes away.
    try:
        with pytest.raises(TimeoutError):
            first.serve(session_id, timeout=3)
    finally:
        first.close()
    assert len(runs.runs) == 2

    # A restarted runner meets the same outage, then the server comes back.
    restarted = runner()
    try:
        threading.Timer(3, outage.clear).start()
        report = restarted.serve(session_id, timeout=60)
    finally:
        restarted.close()

    assert report.results_resubmitted == 2
    assert len(runs.runs) == 2
    assert 503 in proxy.statuses(lambda m, p: m == "POST" and p.endswith("/events"))
    for call in applied_calls(observer.client, session_id).values():
        assert call.output is not None
        assert call.output.status == "completed"


# -- defect 3: a refused result is rejected, kept, reported, never re-run --------------


def test_defect_03_refused_result_is_rejected_never_pruned_never_rerun(
    make_core: MakeCore, proxied: ProxiedHarness, tmp_path: Any
) -> None:
    store_path = tmp_path / "calls.db"
    harness, proxy = proxied(
        make_core(scenario=one_turn([FunctionCall("charge", {"order": "o1"})])),
        store=SQLiteResultStore(store_path),
    )
    runs = CallLog()
    charge = _counted_charge(runs)
    harness.runner.function(charge)
    _refuse_results(proxy)
    session_id = harness.create_session()
    (action,) = harness.wait_for_pending(session_id)
    key = CallKey(session_id, action.turn_id, action.call_id)

    first = _report_of(lambda: harness.serve(session_id, timeout=15))

    assert first.rejected == [key]
    record = harness.runner.store.get(key)
    assert record is not None
    assert record.state is CallState.REJECTED
    assert harness.runner.store.prune(older_than=0) == 0
    assert harness.runner.store.get(key) is not None

    restarted = Harness(
        _via(proxy, harness.runner_api_key),
        harness.kind,
        store=SQLiteResultStore(store_path),
    )
    try:
        restarted.runner.function(charge)
        started = time.monotonic()
        again = _report_of(lambda: restarted.recover(session_id))
        assert again.rejected == [key]
        assert time.monotonic() - started < 10
        later = _report_of(lambda: restarted.serve(session_id, timeout=15))
        assert later.rejected == [key]
    finally:
        restarted.close()
    assert len(runs.runs) == 1


def test_run_turn_returns_when_its_turn_waits_on_a_refused_result(
    make_core: MakeCore, proxied: ProxiedHarness
) -> None:
    """The Turn cannot end until a person settles the refused result: run_turn says so
    at once (the Turn's status, the call in ``report.rejected``) instead of waiting out
    its timeout and raising ServeTimeout."""
    scenario = Scenario(
        turns=[
            TurnScript(answer="ready"),
            TurnScript(steps=[[FunctionCall("charge", {"order": "o1"})]], answer="{summary}"),
        ]
    )
    harness, proxy = proxied(make_core(scenario=scenario))
    runs = CallLog()
    harness.runner.function(_counted_charge(runs))
    session_id = harness.create_session()
    harness.serve(session_id)
    _refuse_results(proxy)

    started = time.monotonic()
    result = harness.run_turn(session_id, "Charge it.", timeout=20)

    assert time.monotonic() - started < 10
    assert result.status == "waiting"
    assert result.text is None
    (key,) = result.report.rejected
    assert key.turn_id == result.turn_id
    assert len(runs.runs) == 1


def test_run_turn_joining_a_turn_that_waits_on_a_result_refused_earlier_returns_at_once(
    make_core: MakeCore, proxied: ProxiedHarness, tmp_path: Any
) -> None:
    """Issue 23: the refusal happened in an earlier process; a restarted runner's
    run_turn, whose input joins the Turn that still waits on the refused call, says so
    at once instead of waiting out its timeout."""
    store_path = tmp_path / "calls.db"
    scenario = Scenario(
        turns=[
            TurnScript(answer="ready"),
            TurnScript(steps=[[FunctionCall("charge", {"order": "o1"})]], answer="{summary}"),
        ]
    )
    harness, proxy = proxied(make_core(scenario=scenario), store=SQLiteResultStore(store_path))
    runs = CallLog()
    harness.runner.function(_counted_charge(runs))
    session_id = harness.create_session()
    harness.serve(session_id)
    _refuse_results(proxy)
    first = harness.run_turn(session_id, "Charge it.", timeout=20)
    assert first.status == "waiting"
    (key,) = first.report.rejected

    restarted = Harness(
        _via(proxy, harness.runner_api_key), harness.kind, store=SQLiteResultStore(store_path)
    )
    try:
        restarted.runner.function(_counted_charge(runs))
        started = time.monotonic()
        again = restarted.run_turn(session_id, "Charge it, please.", timeout=20)
        assert time.monotonic() - started < 10
    finally:
        restarted.close()
    assert again.status == "waiting"
    assert again.report.rejected == [key]
    assert len(runs.runs) == 1


def _report_of(serve: Callable[[], Any]) -> Any:
    """The report of a serve, whether it ended or timed out (core v2's timeout carries it)."""
    try:
        return serve()
    except TimeoutError as timeout:
        return timeout.report  # type: ignore[attr-defined]


# -- defect 9: 409s classified by code; a transient one is retried --------------------


@pytest.mark.parametrize(
    ("code", "message", "expected"),
    [
        ("conflict_error", "Earlier input to this Session is still pending.", "applied"),
        ("idempotency_conflict", "This request conflicts with an earlier one.", "conflicts"),
        ("turn_conflict", "This request conflicts with the Turn.", "abandoned"),
    ],
    ids=["transient-retried", "idempotency-by-code", "turn-by-code"],
)
def test_defect_09_409s_are_classified_by_code_and_transient_ones_retried(
    make_core: MakeCore, proxied: ProxiedHarness, code: str, message: str, expected: str
) -> None:
    harness, proxy = proxied(make_core(scenario=one_turn([FunctionCall("add", {"a": 1, "b": 2})])))
    runs = CallLog()

    @harness.runner.function
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        runs.enter("add", (a, b))
        runs.leave()
        return a + b

    refusals = [2]

    def conflict(method: str, path: str, body: bytes) -> Any:
        if is_result_post(method, path, body) and refusals[0] > 0:
            refusals[0] -= 1
            return api_error(409, code, message)
        return None

    proxy.rule = conflict
    session_id = harness.create_session()
    (action,) = harness.wait_for_pending(session_id)
    key = CallKey(session_id, action.turn_id, action.call_id)

    report = _report_of(
        lambda: harness.serve(session_id, timeout=20 if expected == "applied" else 4)
    )

    assert len(runs.runs) == 1
    if expected == "applied":
        assert report.abandoned == []
        assert report.conflicts == []
        assert _output_of(harness, session_id, key.call_id).status == "completed"
    else:
        assert getattr(report, expected) == [key]
        other = "abandoned" if expected == "conflicts" else "conflicts"
        assert getattr(report, other) == []


# -- defect 5: a store blip on the in-doubt mark never re-runs the function ------------


class _InDoubtBlipStore(MemoryResultStore):
    """Fails the first in-doubt mark with a store outage (core v2 marks with
    ``mark_in_doubt``; the old runner with ``mark(IN_DOUBT)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.blips = 0

    def _blip(self) -> None:
        if self.blips == 0:
            self.blips += 1
            raise StoreUnavailableError("test blip during the in-doubt mark")

    def mark_in_doubt(self, key: CallKey, *, owner: str, expected_attempts: int) -> bool:
        self._blip()
        return bool(super().mark_in_doubt(key, owner=owner, expected_attempts=expected_attempts))

    def mark(self, key: CallKey, state: CallState) -> None:
        if state is CallState.IN_DOUBT:
            self._blip()
        super().mark(key, state)


def test_defect_05_function_ending_without_result_is_not_rerun_after_a_store_blip(
    make_core: MakeCore,
) -> None:
    """Sync runner only: on the async runner a ``SystemExit`` from a function ends the
    event loop, as asyncio does for any task, so nothing is left to re-run it."""
    store = _InDoubtBlipStore()
    harness = Harness(
        make_core(scenario=one_turn([FunctionCall("charge", {"order": "o1"})])), "sync", store=store
    )
    runs = CallLog()

    @harness.runner.function
    def charge(order: str) -> str:
        """Charge an order."""
        runs.enter("charge", order)
        runs.leave()
        raise SystemExit("the function ended its worker")

    session_id = harness.create_session()
    for _ in range(2):
        with contextlib.suppress(SystemExit, TimeoutError):
            harness.serve(session_id, timeout=8)
    harness.close()
    assert store.blips == 1, "the in-doubt mark was never attempted"
    assert len(runs.runs) == 1


# -- defect 6: one runner serving a Session twice with a slow claim acknowledgement -----


class _SlowClaimStore(MemoryResultStore):
    """Acknowledges each claim 30 ms after it committed, as a remote database does."""

    def claim(self, key: CallKey, **options: Any) -> Any:
        claim = super().claim(key, **options)
        time.sleep(0.03)
        return claim


def test_defect_06_same_runner_serving_a_session_twice_runs_each_call_once(
    make_core: MakeCore, make_harness: MakeHarness
) -> None:
    for _ in range(3):
        _serve_one_session_twice(make_core, make_harness)


def _serve_one_session_twice(make_core: MakeCore, make_harness: MakeHarness) -> None:
    calls = [FunctionCall("add", {"a": i, "b": i}) for i in range(4)]
    harness = make_harness(make_core(scenario=one_turn(calls)), store=_SlowClaimStore())
    runs = CallLog()

    @harness.runner.function
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        runs.enter("add", a)
        time.sleep(0.05)
        runs.leave()
        return a + b

    session_id = harness.create_session()
    _wait_until(lambda: len(harness.wait_for_pending(session_id)) == 4, what="four calls")
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            harness.serve(session_id, timeout=30)
        except BaseException as error:
            errors.append(error)

    serves = [threading.Thread(target=serve) for _ in range(2)]
    for thread in serves:
        thread.start()
    for thread in serves:
        thread.join(60)
    assert not errors
    assert sorted(a for _, a in runs.runs) == [0, 1, 2, 3]
    for call in applied_calls(harness.client, session_id).values():
        assert call.output is not None
        assert call.output.status == "completed"


# -- defect 7: two daemons on one event loop share SIGTERM handling --------------------

_TWO_DAEMONS = """
import asyncio, os, signal
from openagentcore import AsyncClient
from openagentcore.local import LocalCore, Scenario, TurnScript
from openagentcore.runner import AsyncFunctionRunner
from openagentcore.store import MemoryResultStore


def previous(signum, frame):
    print("PREVIOUS HANDLER RAN", flush=True)


async def main():
    signal.signal(signal.SIGTERM, previous)
    core = LocalCore(scenario=Scenario(turns=[TurnScript(steps=[], answer="hi")])).start()
    client = AsyncClient(api_key=core.api_key, base_url=core.base_url)
    runner = AsyncFunctionRunner(client, store=MemoryResultStore())

    @runner.function
    def noop() -> str:
        '''Do nothing.'''
        return "ok"

    spec = {"model": "scripted", "tools": runner.tools}
    first_id = (await client.sessions.create(agent=spec, input="go")).id
    second_id = (await client.sessions.create(agent=spec, input="go")).id
    first = asyncio.create_task(runner.serve(first_id, until="forever", timeout=1.5))
    second = asyncio.create_task(runner.serve(second_id, until="forever", timeout=60))
    try:
        await first
    except TimeoutError:
        print("FIRST ENDED", flush=True)
    await asyncio.sleep(0.3)
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(second, 30)
    print("SECOND STOPPED", flush=True)
    print("RESTORED", signal.getsignal(signal.SIGTERM) is previous, flush=True)
    await runner.close()
    await client.close()
    core.stop()


asyncio.run(main())
"""


def test_defect_07_sigterm_still_stops_the_other_daemon_after_one_ends(tmp_path: Any) -> None:
    """Async runner only: the sync runner handles signals in the main thread, where
    only one serve can run."""
    child = subprocess.run(
        [sys.executable, "-c", _TWO_DAEMONS], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0, (child.returncode, child.stdout, child.stderr[-2000:])
    assert child.stdout.split("\n")[:3] == ["FIRST ENDED", "SECOND STOPPED", "RESTORED True"]


# -- defect 12: idempotent re-runs after crashes are capped ---------------------------

_CRASHING_WORKER = """
import os, signal, sys
from openagentcore import Client
from openagentcore.runner import FunctionRunner
from openagentcore.store import SQLiteResultStore

session_id, workdir = sys.argv[1], sys.argv[2]
client = Client(
    api_key=os.environ["OPENAGENTCORE_API_KEY"], base_url=os.environ["OPENAGENTCORE_BASE_URL"]
)
runner = FunctionRunner(client, store=SQLiteResultStore(os.path.join(workdir, "calls.db")))


@runner.function(idempotent=True)
def refresh(sku: str) -> str:
    '''Refresh an item's inventory.'''
    with open(os.path.join(workdir, "effects.log"), "a") as log:
        log.write(sku + "\\n")
        log.flush()
        os.fsync(log.fileno())
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


report = runner.serve(session_id, timeout=30)
print(len(report.in_doubt), flush=True)
runner.close()
"""


def test_defect_12_idempotent_function_crashing_its_process_is_rerun_at_most_max_attempts(
    make_core: MakeCore, tmp_path: Any
) -> None:
    core = make_core(scenario=one_turn([FunctionCall("refresh", {"sku": "s1"})]))
    harness = Harness(core, "sync")
    try:

        @harness.runner.function(idempotent=True)
        def refresh(sku: str) -> str:
            """Refresh an item's inventory."""
            return sku

        session_id = harness.create_session()
        (action,) = harness.wait_for_pending(session_id)
        env = {
            **os.environ,
            "OPENAGENTCORE_API_KEY": core.api_key,
            "OPENAGENTCORE_BASE_URL": core.base_url,
        }
        codes = []
        for _ in range(6):
            child = subprocess.run(
                [sys.executable, "-c", _CRASHING_WORKER, session_id, str(tmp_path)],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            codes.append(child.returncode)
            if child.returncode == 0:
                break
        effects = (tmp_path / "effects.log").read_text().split()
        assert effects == ["s1"] * 3, codes
        assert codes == [-signal.SIGKILL] * 3 + [0]
        output = _output_of(harness, session_id, action.call_id)
        assert output.status == "failed"
        assert output.error == IN_DOUBT_ERROR
    finally:
        harness.close()


# -- defect 10: a fast clock never fails a call another worker runs (PostgreSQL) -------


@pytest.fixture
def postgres_table() -> Iterator[tuple[str, str]]:
    dsn = os.environ.get("OPENAGENTCORE_TEST_POSTGRES_DSN")
    if not dsn:
        pytest.skip("set OPENAGENTCORE_TEST_POSTGRES_DSN to run the PostgreSQL regressions")
    table = f"defect10_{uuid.uuid4().hex[:12]}"
    yield dsn, table
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f"DROP TABLE IF EXISTS {table}")


_FAST_CLOCK_WORKER = """
import json, os, sys, time

_real_time = time.time
time.time = lambda: _real_time() + 90  # this host's clock runs 90 s fast

from openagentcore import Client
from openagentcore.runner import FunctionRunner
from openagentcore.store import PostgresResultStore

session_id, dsn, table = sys.argv[1:4]
client = Client(
    api_key=os.environ["OPENAGENTCORE_API_KEY"], base_url=os.environ["OPENAGENTCORE_BASE_URL"]
)
runner = FunctionRunner(client, store=PostgresResultStore(dsn, table=table))
runs = []


@runner.function
def charge(order: str) -> str:
    '''Charge an order.'''
    runs.append(order)
    return "charged " + order


try:
    report = runner.serve(session_id, timeout=5)
except TimeoutError as timeout:
    report = getattr(timeout, "report", None)
print(json.dumps({"runs": runs, "in_doubt": None if report is None else len(report.in_doubt)}))
runner.close()
"""


def test_defect_10_fast_clock_worker_does_not_fail_a_call_another_worker_runs(
    make_core: MakeCore, postgres_table: tuple[str, str]
) -> None:
    """Sync runner in a child process whose ``time.time`` runs 90 s fast; the call is
    held by a live worker on another host under a 60 s lease."""
    from openagentcore.store import PostgresResultStore

    dsn, table = postgres_table
    core = make_core(scenario=one_turn([FunctionCall("charge", {"order": "o1"})]))
    honest = PostgresResultStore(dsn, table=table)
    harness = Harness(core, "sync", store=honest)
    try:

        @harness.runner.function
        def charge(order: str) -> str:
            """Charge an order."""
            return order

        session_id = harness.create_session()
        (action,) = harness.wait_for_pending(session_id)
        key = CallKey(session_id, action.turn_id, action.call_id)
        claim = honest.claim(
            key,
            function_name="charge",
            arguments_hash=arguments_hash(action.arguments),
            owner=REMOTE_OWNER,
            lease_seconds=60,
        )
        assert claim.won
        env = {
            **os.environ,
            "OPENAGENTCORE_API_KEY": core.api_key,
            "OPENAGENTCORE_BASE_URL": core.base_url,
        }
        child = subprocess.run(
            [sys.executable, "-c", _FAST_CLOCK_WORKER, session_id, dsn, table],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert child.returncode == 0, child.stderr[-2000:]
        assert json.loads(child.stdout.strip().splitlines()[-1]) == {"runs": [], "in_doubt": 0}
        assert applied_calls(harness.client, session_id)[key.call_id].output is None
        record = honest.get(key)
        assert record is not None
        assert record.state is CallState.STARTED
        # Marking in doubt is compare-and-set: no other worker can take a live claim,
        # and the holder cannot with a stale attempt count.
        assert honest.mark_in_doubt(key, owner="fast-host:1:0", expected_attempts=1) is False
        assert honest.mark_in_doubt(key, owner=REMOTE_OWNER, expected_attempts=2) is False
        record = honest.get(key)
        assert record is not None
        assert record.state is CallState.STARTED
    finally:
        harness.close()
