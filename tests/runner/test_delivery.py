"""Delivery of results over real loopback HTTP, with the emulator's faults turned on.

Every test runs with both runners; most also with both plain and coroutine functions.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Sequence

import pydantic
import pytest

from openagentcore.local import Faults, FunctionCall, LocalCore, Scenario, TurnScript
from openagentcore.runner import AsyncFunctionRunner, RunnerError, ServeReport
from openagentcore.store import CallKey, CallState
from openagentcore.types import InputCancelEvent, InputMessageEvent, ToolResultEvent

from ._support import CallLog, Flavour, Harness, applied_calls, flavoured, one_turn

MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]

ADDITIONS = [
    [FunctionCall("add", {"a": 1, "b": 2}), FunctionCall("add", {"a": 3, "b": 4})],
    [FunctionCall("add", {"a": 5, "b": 6}), FunctionCall("add", {"a": 7, "b": 8})],
    [FunctionCall("add", {"a": 9, "b": 10})],
]


def register_add(harness: Harness, flavour: Flavour, log: CallLog) -> None:
    def add(a: int, b: int) -> int:
        """Add two integers."""
        log.enter("add", (a, b))
        log.leave()
        return a + b

    harness.runner.function(flavoured(add, flavour))


def assert_each_addition_ran_once(harness: Harness, session_id: str, log: CallLog) -> None:
    calls = applied_calls(harness.client, session_id)
    pairs = [(c.arguments["a"], c.arguments["b"]) for c in calls.values()]
    assert sorted(pairs) == sorted(pair for _, pair in log.runs)
    assert len(calls) == sum(len(step) for step in ADDITIONS)
    for applied in calls.values():
        assert applied.output is not None
        assert applied.output.output == str(applied.arguments["a"] + applied.arguments["b"])
    assert harness.client.sessions.retrieve(session_id).status == "idle"


def _reconnected(harness: Harness, report: ServeReport) -> None:
    assert report.reconnects >= 2


def _skipped_duplicates(harness: Harness, report: ServeReport) -> None:
    assert report.duplicates_skipped >= 1


def _retried_503(harness: Harness, report: ServeReport) -> None:
    assert 503 in harness.statuses("POST", "/events")


def _retried_unknown_call(harness: Harness, report: ServeReport) -> None:
    assert 400 in harness.statuses("POST", "/events")
    assert report.rejected == []


FAULTS = {
    "stream-closed-after-3-events": (Faults(close_stream_after=3), _reconnected),
    "every-event-twice": (Faults(duplicate_every=1), _skipped_duplicates),
    "503-before-admitting": (Faults(reject_input_every=2, retry_after=0), _retried_503),
    "503-after-admitting": (Faults(lose_input_response_every=2, retry_after=0), _retried_503),
    "registration-race": (Faults(pending_call_delay=0.1), _retried_unknown_call),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_every_call_runs_once_and_is_applied_despite_faults(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour, fault: str
) -> None:
    faults, shows_the_fault = FAULTS[fault]
    harness = make_harness(make_core(scenario=one_turn(*ADDITIONS), faults=faults))
    log = CallLog()
    register_add(harness, flavour, log)
    session_id = harness.create_session()

    report = harness.serve(session_id)

    assert_each_addition_ran_once(harness, session_id, log)
    assert report.calls_run == report.results_submitted == 5
    assert report.final_status == "idle"
    shows_the_fault(harness, report)


def test_serve_leaves_every_record_applied_when_it_returns(
    make_core: MakeCore, make_harness: MakeHarness
) -> None:
    harness = make_harness(make_core(scenario=one_turn(*ADDITIONS)))
    register_add(harness, "def", CallLog())
    session_id = harness.create_session()

    harness.serve(session_id)

    records = harness.runner.store.find(session_id=session_id)
    assert len(records) == 5
    # Progress marks are written in batches; the last batch goes out before serve returns.
    assert {record.state for record in records} == {CallState.APPLIED}


def test_result_for_a_cancelled_turn_is_abandoned(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    harness = make_harness(make_core(scenario=one_turn([FunctionCall("ship", {"order": "o1"})])))
    session: dict[str, str] = {}

    def ship(order: str) -> str:
        """Ship an order; the user cancels the Turn while it runs."""
        harness.client.sessions.events.create(session["id"], events=[InputCancelEvent()])
        return f"shipped {order}"

    harness.runner.function(flavoured(ship, flavour))
    session["id"] = harness.create_session()

    report = harness.serve(session["id"])

    (call_id,) = applied_calls(harness.client, session["id"])
    (key,) = report.abandoned
    assert key.call_id == call_id
    assert report.conflicts == report.rejected == []
    record = harness.runner.store.get(key)
    assert record is not None
    assert record.state is CallState.ABANDONED
    assert applied_calls(harness.client, session["id"])[call_id].output is None
    (turn,) = harness.client.sessions.turns.list(session["id"]).data
    assert turn.status == "cancelled"


def test_a_different_result_already_on_the_server_is_reported_not_overwritten(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    harness = make_harness(make_core(scenario=one_turn([FunctionCall("charge", {"order": "o1"})])))
    session: dict[str, str] = {}

    def charge(order: str) -> str:
        """Charge an order; another worker answers the same call meanwhile."""
        (pending,) = harness.client.sessions.retrieve(session["id"]).pending_function_calls
        other = ToolResultEvent(
            turn_id=pending.turn_id, call_id=pending.call_id, success=True, output="elsewhere"
        )
        harness.client.sessions.events.create(session["id"], events=[other])
        return f"charged {order}"

    harness.runner.function(flavoured(charge, flavour))
    session["id"] = harness.create_session()

    report = harness.serve(session["id"])

    ((call_id, applied),) = applied_calls(harness.client, session["id"]).items()
    assert [key.call_id for key in report.conflicts] == [call_id]
    assert applied.output is not None
    assert applied.output.output == "elsewhere"
    record = harness.runner.store.get(report.conflicts[0])
    assert record is not None
    assert record.state is CallState.ABANDONED
    assert record.result is not None
    assert record.result["output"] == "charged o1"


REFUND_TOOL = {
    "type": "function",
    "name": "refund",
    "description": "Refund an order; served by another application.",
    "parameters": {"type": "object", "properties": {"order": {"type": "string"}}},
}
WITH_REFUND = [[FunctionCall("add", {"a": 1, "b": 1}), FunctionCall("refund", {"order": "o9"})]]


def test_calls_to_unknown_functions_are_left_pending_by_default(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    harness = make_harness(make_core(scenario=one_turn(*WITH_REFUND)))
    log = CallLog()
    register_add(harness, flavour, log)
    session_id = harness.client.sessions.create(
        agent={"model": "scripted", "tools": [*harness.runner.tools, REFUND_TOOL]}, input="go"
    ).id

    report = harness.recover(session_id)

    (pending,) = harness.client.sessions.retrieve(session_id).pending_function_calls
    assert pending.name == "refund"
    assert report.left_pending == [CallKey(session_id, pending.turn_id, pending.call_id)]
    assert log.runs == [("add", (1, 1))]
    # Whoever serves refund can still answer it, and the Turn goes on.
    answer = ToolResultEvent(turn_id=pending.turn_id, call_id=pending.call_id, success=True)
    harness.client.sessions.events.create(session_id, events=[answer])
    assert harness.serve(session_id).final_status == "idle"
    assert log.runs == [("add", (1, 1))]


def test_calls_to_unknown_functions_fail_when_asked(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    harness = make_harness(make_core(scenario=one_turn(*WITH_REFUND)), unknown_functions="fail")
    register_add(harness, flavour, CallLog())
    session_id = harness.client.sessions.create(
        agent={"model": "scripted", "tools": [*harness.runner.tools, REFUND_TOOL]}, input="go"
    ).id

    report = harness.serve(session_id)

    assert report.final_status == "idle"
    assert report.left_pending == []
    (refund,) = (
        c for c in applied_calls(harness.client, session_id).values() if c.call.name == "refund"
    )
    assert refund.output is not None
    assert refund.output.status == "failed"
    assert refund.output.error is not None
    assert "'refund'" in refund.output.error


@pytest.mark.parametrize("limit", [1, 3])
def test_max_concurrency_bounds_the_calls_running_at_once(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour, limit: int
) -> None:
    step = [FunctionCall("work", {"n": n}) for n in range(6)]
    harness = make_harness(make_core(scenario=one_turn(step)), max_concurrency=limit)
    log = CallLog()

    def work(n: int) -> int:
        """Work for a while."""
        log.enter("work", n)
        time.sleep(0.05)
        log.leave()
        return n

    async def work_async(n: int) -> int:
        """Work for a while."""
        log.enter("work", n)
        await asyncio.sleep(0.05)
        log.leave()
        return n

    harness.runner.function(name="work")(work if flavour == "def" else work_async)
    session_id = harness.create_session()

    report = harness.serve(session_id)

    assert report.calls_run == 6
    assert sorted(n for _, n in log.runs) == list(range(6))
    assert log.peak == limit


class Verdict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    approved: bool
    reason: str


def test_run_turn_parses_a_structured_answer_into_output_type(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    harness = make_harness(make_core())
    log = CallLog()
    register_add(harness, flavour, log)
    text = {"format": {"type": "json_schema", "schema": Verdict.model_json_schema()}}
    session_id = harness.create_session(text=text)
    harness.serve(session_id)

    result = harness.run_turn(session_id, "Approve it?", output_type=Verdict)

    assert result.status == "completed"
    assert isinstance(result.output, Verdict)
    assert result.text is not None
    assert result.output == Verdict.model_validate_json(result.text)
    assert result.report.calls_run == 1
    assert len(log.runs) == 2  # one call in the first Turn, one in this one
    (latest, *_) = harness.client.sessions.turns.list(session_id, order="desc").data
    assert result.turn_id == latest.id


def test_run_turn_serves_only_the_turn_it_starts(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    scenario = Scenario(
        turns=[
            TurnScript(answer="hello"),
            TurnScript(steps=ADDITIONS, answer="sum: {summary}"),
        ]
    )
    harness = make_harness(make_core(scenario=scenario))
    log = CallLog()
    register_add(harness, flavour, log)
    session_id = harness.create_session()
    assert harness.serve(session_id).calls_run == 0

    result = harness.run_turn(session_id, "add them up")

    assert result.status == "completed"
    assert result.output == result.text
    assert result.text is not None
    assert result.text.startswith("sum: Results: add: 3; add: 7;")
    assert_each_addition_ran_once(harness, session_id, log)


@pytest.mark.parametrize(
    ("steps", "close_stream_after"),
    [
        pytest.param(ADDITIONS[:1], None, id="steady-stream"),
        pytest.param(ADDITIONS[:1], 4, id="dropping-stream"),
        # Ends before run_turn has read the Turn's events: found through the Items.
        pytest.param([], None, id="turn-without-calls"),
    ],
)
def test_run_turn_answers_with_the_turns_final_message(
    make_core: MakeCore,
    make_harness: MakeHarness,
    steps: list[list[FunctionCall]],
    close_stream_after: int | None,
) -> None:
    """The answer comes from the stream, or from the Session's Items if the stream
    dropped while the Turn ran, and is the same either way."""
    scenario = Scenario(
        turns=[
            TurnScript(answer="first answer"),
            TurnScript(steps=steps, answer="second: {summary}"),
        ]
    )
    harness = make_harness(
        make_core(scenario=scenario, faults=Faults(close_stream_after=close_stream_after))
    )
    register_add(harness, "def", CallLog())
    session_id = harness.create_session()
    harness.serve(session_id)

    result = harness.run_turn(session_id, "again")

    assert result.status == "completed"
    expected = "second: Results: add: 3; add: 7." if steps else "second: "
    assert result.text is not None
    assert result.text.startswith(expected)
    assert (result.report.reconnects > 0) == (close_stream_after is not None)


def test_one_async_runner_serves_several_sessions_at_once(
    make_core: MakeCore, flavour: Flavour
) -> None:
    sessions = 3
    harness = Harness(make_core(scenario=one_turn([FunctionCall("meet", {"who": "x"})])), "async")
    arrived = threading.Barrier(sessions, timeout=5)
    all_here = asyncio.Event()
    waiting: list[str] = []

    def meet(who: str) -> str:
        """Wait until the calls of every Session run at the same time."""
        arrived.wait()
        return f"met {who}"

    async def meet_async(who: str) -> str:
        """Wait until the calls of every Session run at the same time."""
        waiting.append(who)
        if len(waiting) == sessions:
            all_here.set()
        await asyncio.wait_for(all_here.wait(), timeout=5)
        return f"met {who}"

    try:
        harness.runner.function(name="meet")(meet if flavour == "def" else meet_async)
        ids = [harness.create_session() for _ in range(sessions)]

        runner = harness.runner
        assert isinstance(runner, AsyncFunctionRunner)

        async def serve_all() -> list[ServeReport]:
            return await asyncio.gather(*(runner.serve(i, timeout=15) for i in ids))

        reports = harness.portal.call(serve_all)
        assert [r.calls_run for r in reports] == [1] * sessions
        for session_id in ids:
            ((_, applied),) = applied_calls(harness.client, session_id).items()
            assert applied.output is not None
            assert applied.output.output == "met x"
    finally:
        harness.close()


def test_plain_functions_get_max_concurrency_threads_in_the_async_runner(
    make_core: MakeCore,
) -> None:
    # More calls than asyncio's default thread pool has threads on a small machine.
    calls = 12
    step = [FunctionCall("meet", {"n": n}) for n in range(calls)]
    harness = Harness(make_core(scenario=one_turn(step)), "async", max_concurrency=calls)
    together = threading.Barrier(calls, timeout=5)

    def meet(n: int) -> int:
        """Return once every call runs at the same time."""
        together.wait()
        return n

    try:
        harness.runner.function(meet)
        report = harness.serve(harness.create_session())
    finally:
        harness.close()
    assert report.calls_run == calls
    assert report.function_errors == 0


def test_serve_forever_follows_new_turns_until_stopped(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    scenario = Scenario(
        turns=[
            TurnScript(steps=[[FunctionCall("add", {"a": 1, "b": 2})]]),
            TurnScript(steps=[[FunctionCall("add", {"a": 3, "b": 4})]]),
        ]
    )
    harness = make_harness(make_core(scenario=scenario))
    log = CallLog()
    register_add(harness, flavour, log)
    session_id = harness.create_session()
    reports: list[ServeReport] = []
    server = threading.Thread(
        target=lambda: reports.append(harness.serve(session_id, timeout=30, until="forever"))
    )
    server.start()

    def wait_for_outputs(count: int) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            calls = applied_calls(harness.client, session_id).values()
            if sum(c.output is not None for c in calls) == count:
                return
            time.sleep(0.02)
        raise AssertionError(f"{count} outputs never appeared")

    wait_for_outputs(1)
    harness.client.sessions.events.create(session_id, events=[InputMessageEvent.from_text("more")])
    wait_for_outputs(2)
    stopped_at = time.monotonic()
    harness.runner.stop()
    server.join(timeout=10)

    assert not server.is_alive()
    assert time.monotonic() - stopped_at < 2
    (report,) = reports
    assert report.calls_run == 2
    assert sorted(pair for _, pair in log.runs) == [(1, 2), (3, 4)]


def test_a_rejected_key_stops_serving_without_showing_the_key(
    make_core: MakeCore, make_harness: MakeHarness
) -> None:
    wrong_key = "sk-wrong-0123456789abcdef"
    harness = make_harness(make_core(scenario=one_turn(*ADDITIONS)), api_key=wrong_key)
    register_add(harness, "def", CallLog())
    session_id = harness.create_session()

    started = time.monotonic()
    with pytest.raises(RunnerError) as raised:
        harness.serve(session_id)

    assert time.monotonic() - started < 5
    assert 401 in harness.statuses("GET", "/events")
    assert wrong_key not in str(raised.value)
    assert wrong_key not in repr(raised.value)
    assert wrong_key not in repr(harness.runner)
    assert wrong_key not in repr(harness.runner.client)


def test_one_conflicting_result_does_not_sink_the_others_in_its_batch(
    make_core: MakeCore, make_harness: MakeHarness
) -> None:
    orders = ["o1", "o2", "o3"]
    step = [FunctionCall("charge", {"order": order}) for order in orders]
    harness = make_harness(make_core(scenario=one_turn(step)))
    together = threading.Barrier(len(orders), timeout=5)
    session: dict[str, str] = {}

    def charge(order: str) -> str:
        """Charge an order; another worker answers o2 meanwhile."""
        if order == "o2":
            (pending,) = (
                action
                for action in harness.client.sessions.retrieve(session["id"]).pending_function_calls
                if action.decoded_arguments() == {"order": "o2"}
            )
            other = ToolResultEvent(
                turn_id=pending.turn_id, call_id=pending.call_id, success=True, output="elsewhere"
            )
            harness.client.sessions.events.create(session["id"], events=[other])
        # Finish together, so the three results are likely posted as one batch.
        together.wait()
        return f"charged {order}"

    harness.runner.function(charge)
    session["id"] = harness.create_session()

    report = harness.serve(session["id"])

    outputs = {
        applied.arguments["order"]: applied.output.output
        for applied in applied_calls(harness.client, session["id"]).values()
        if applied.output is not None
    }
    assert outputs == {"o1": "charged o1", "o2": "elsewhere", "o3": "charged o3"}
    (conflict,) = report.conflicts
    assert applied_calls(harness.client, session["id"])[conflict.call_id].arguments == {
        "order": "o2"
    }
    assert report.results_submitted == 2


def test_a_refused_result_is_reported_and_serve_still_ends(
    make_core: MakeCore, make_harness: MakeHarness
) -> None:
    """A saved result the server refuses (here: recorded under the wrong Turn) is never
    replaced; serve reports it instead of waiting on the call forever."""
    harness = make_harness(make_core(scenario=one_turn([FunctionCall("add", {"a": 1, "b": 2})])))
    register_add(harness, "def", CallLog())
    session_id = harness.create_session()
    (action,) = harness.wait_for_pending(session_id)
    key = CallKey(session_id, action.turn_id, action.call_id)
    store = harness.runner.store
    store.claim(key, function_name="add", arguments_hash="x", owner="gone:1:x", lease_seconds=60)
    wrong_turn = {
        "type": "agent.session.input.tool_result",
        "turn_id": "turn_not_this_one",
        "call_id": action.call_id,
        "success": True,
        "output": "3",
    }
    store.save_result(key, wrong_turn, owner=None)

    report = harness.serve(session_id, timeout=10)

    assert report.rejected == [key]
    assert report.final_status == "requires_action"
    record = store.get(key)
    assert record is not None
    assert record.state is CallState.REJECTED


def _waiting_once_all_run(count: int, flavour: Flavour) -> Callable[..., object]:
    """``wait(n)``, which waits n hundredths of a second once ``count`` calls of it run:
    the calls then end as far apart as their arguments say, however slowly a loaded
    machine starts them (beside a busy core, eight calls took longer than the 50 ms a
    result lingers for the others to start, and went out in two POSTs)."""
    lock = threading.Lock()
    arrived = [0]
    all_running = threading.Event()

    def arrive() -> None:
        with lock:
            arrived[0] += 1
            if arrived[0] == count:
                all_running.set()

    def wait(n: int) -> int:
        """Wait n hundredths of a second."""
        arrive()
        all_running.wait()
        time.sleep(n / 100)
        return n

    if flavour == "def":
        return wait

    @functools.wraps(wait)
    async def wait_in_a_coroutine(n: int) -> int:
        # The async runner runs coroutines on its loop: wait for the others off it.
        arrive()
        await asyncio.to_thread(all_running.wait)
        await asyncio.sleep(n / 100)
        return n

    return wait_in_a_coroutine


@pytest.mark.parametrize(
    ("hundredths", "slow_results", "most_posts"),
    [
        # One POST of a Session's results at a time: results saved while one is in
        # flight (each takes 50 ms here) go together in the next.
        pytest.param(range(8), 0.05, 3, id="ending-10-ms-apart"),
        # The Turn needs every result of a step before it goes on: the first results
        # wait (up to 50 ms) for the calls still running, and all go in one POST.
        pytest.param([2] * 8, 0.0, 1, id="ending-together"),
    ],
)
def test_parallel_results_go_out_in_few_requests(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    hundredths: Sequence[int],
    slow_results: float,
    most_posts: int,
) -> None:
    calls = [FunctionCall("wait", {"n": n}) for n in hundredths]
    harness = make_harness(make_core(scenario=one_turn(calls)), slow_results=slow_results)
    harness.runner.function(_waiting_once_all_run(len(calls), flavour))
    session_id = harness.create_session()

    report = harness.serve(session_id)

    assert report.results_submitted == 8
    assert 1 <= len(harness.statuses("POST", "/events")) <= most_posts
