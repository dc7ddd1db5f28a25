"""What the application hands the runner (hooks, telemetry providers, a function's
signature, an ``output_type``) must never run a call twice, lose it, or crash or hang
a serve; mistakes must fail at registration, naming the function.

Each test pins one defect found by attacking these objects; each failed before its fix."""

from __future__ import annotations

import json
import logging
import time
import warnings
from collections.abc import Callable
from typing import Any

import pydantic
import pytest

from openagentcore import ServeReport, StructuredOutputError, TurnResult
from openagentcore._errors import AdmissionError
from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript
from openagentcore.runner import (
    IN_DOUBT_ERROR,
    InDoubtCall,
    InDoubtDecision,
    structured_output,
)
from openagentcore.runner._output import parse_turn_output
from openagentcore.runner._registry import describe_function
from openagentcore.store import CallKey, arguments_hash

from ._support import PAIRED, CallLog, Flavour, Harness, applied_calls, flavoured, one_turn

MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]

RUNNER_COMBINATIONS = PAIRED

#: A worker on another host whose lease ran out: only the in-doubt policy settles it.
REMOTE_OWNER = "another-host:4242:feedface0000"


def _counted(runs: CallLog) -> Callable[[str], str]:
    def charge(order: str) -> str:
        """Charge an order."""
        runs.enter("charge", order)
        runs.leave()
        return f"charged {order}"

    return charge


def _output_of(harness: Harness, session_id: str, call_id: str) -> Any:
    applied = applied_calls(harness.client, session_id)[call_id]
    assert applied.output is not None, f"no output was applied for {call_id}"
    return applied.output


def _in_doubt_elsewhere(harness: Harness, session_id: str) -> CallKey:
    """Leave the Session's pending call started by a dead remote worker."""
    (action,) = harness.wait_for_pending(session_id)
    key = CallKey(session_id, action.turn_id, action.call_id)
    claim = harness.runner.store.claim(
        key,
        function_name=action.name,
        arguments_hash=arguments_hash(action.arguments),
        owner=REMOTE_OWNER,
        lease_seconds=0.001,
    )
    assert claim.won
    time.sleep(0.05)
    return key


# -- telemetry ----------------------------------------------------------------------


class _RaisingSpan:
    def is_recording(self) -> bool:
        return True

    def set_attribute(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("exporter down")

    def set_status(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("exporter down")

    def end(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("exporter down")


class _Tracer:
    def __init__(self, start: Callable[[], Any]) -> None:
        self._start = start

    def start_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._start()


class _TracerProvider:
    def __init__(self, start: Callable[[], Any]) -> None:
        self._start = start

    def get_tracer(self, *args: Any, **kwargs: Any) -> _Tracer:
        return _Tracer(self._start)


def _raise() -> Any:
    raise RuntimeError("tracer broken")


@pytest.mark.parametrize(
    "start",
    [_raise, _RaisingSpan, lambda: None],
    ids=["start_span-raises", "span-methods-raise", "start_span-returns-None"],
)
def test_a_broken_tracer_never_fails_the_serve_or_loses_its_call(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour, start: Callable[[], Any]
) -> None:
    """A tracer whose ``start_span`` raises (or returns ``None``, or whose spans raise)
    is called unguarded inside the pump's round (``run_round`` -> ``CallObserver``),
    after the core handed over its effects: the round raises, the runner fails every
    serve with ``RunnerError("The runner failed: ...")`` and the effects of that round
    (the claimed call's run) are dropped, leaving the call started with no result."""
    core = make_core(scenario=one_turn([FunctionCall("charge", {"order": "o1"})]))
    harness = make_harness(core, tracer_provider=_TracerProvider(start), shutdown_grace=1)
    runs = CallLog()
    harness.runner.function(flavoured(_counted(runs), flavour))
    session_id = harness.create_session()

    report = harness.serve(session_id, timeout=10)

    assert report.final_status == "idle"
    assert len(runs.runs) == 1
    (call_id,) = core.stored_results(session_id)
    assert _output_of(harness, session_id, call_id).status == "completed"


class _RaisingInstrument:
    def add(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("metrics backend down")

    def record(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("metrics backend down")


class _Meter:
    def __getattr__(self, name: str) -> Callable[..., _RaisingInstrument]:
        return lambda *args, **kwargs: _RaisingInstrument()


class _MeterProvider:
    def get_meter(self, *args: Any, **kwargs: Any) -> _Meter:
        return _Meter()


def test_a_meter_whose_instruments_raise_never_fails_the_serve(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    """``Counter.add``/``Histogram.record`` are called unguarded in the pump's round when
    a call settles: one raising instrument fails every serve of the runner with
    ``RunnerError`` although the call was served."""
    core = make_core(
        scenario=one_turn(
            [FunctionCall("charge", {"order": "o1"})], [FunctionCall("charge", {"order": "o2"})]
        )
    )
    harness = make_harness(core, meter_provider=_MeterProvider(), shutdown_grace=1)
    runs = CallLog()
    harness.runner.function(flavoured(_counted(runs), flavour))
    session_id = harness.create_session()

    report = harness.serve(session_id, timeout=10)

    assert report.final_status == "idle"
    assert sorted(order for _, order in runs.runs) == ["o1", "o2"]


class _BrokenHandler(logging.Handler):
    """An application's handler that ships call lines somewhere and fails."""

    def emit(self, record: logging.LogRecord) -> None:
        raise OSError("log shipper unreachable")


def test_a_raising_log_handler_on_the_call_log_never_fails_the_serve(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    """The per-call INFO lines of ``openagentcore.runner.calls`` are written inside the
    pump's round; a handler whose ``emit`` raises (``logging.Handler.handle`` does not
    catch it) fails the round, so the runner fails every serve with ``RunnerError`` and
    drops the effects of that round."""
    core = make_core(scenario=one_turn([FunctionCall("charge", {"order": "o1"})]))
    harness = make_harness(core, shutdown_grace=1)
    runs = CallLog()
    harness.runner.function(flavoured(_counted(runs), flavour))
    session_id = harness.create_session()
    calls_logger = logging.getLogger("openagentcore.runner.calls")
    handler = _BrokenHandler(logging.INFO)
    level = calls_logger.level
    calls_logger.addHandler(handler)
    calls_logger.setLevel(logging.INFO)
    try:
        report = harness.serve(session_id, timeout=10)
    finally:
        calls_logger.removeHandler(handler)
        calls_logger.setLevel(level)

    assert report.final_status == "idle"
    assert len(runs.runs) == 1


# -- hooks ----------------------------------------------------------------------------


class _HookAbort(BaseException):
    """What a hook may raise that is not an ``Exception`` (like ``SystemExit``)."""


@pytest.mark.parametrize("abort", [SystemExit, _HookAbort], ids=["SystemExit", "BaseException"])
def test_on_in_doubt_raising_a_base_exception_falls_back_instead_of_hanging(
    make_core: MakeCore, make_harness: MakeHarness, abort: type[BaseException]
) -> None:
    """``ask_in_doubt`` catches only ``Exception``. A hook that raises ``SystemExit`` (or
    any ``BaseException``) kills the hook job, no ``InDoubtAnswer`` is ever delivered,
    and the call stays in the ``deciding`` phase: the serve waits for it until its
    timeout (``ServeTimeout``) and the call is never settled. Documented: "A hook that
    raises is logged and the call falls back to the default"."""

    def policy(call: InDoubtCall) -> InDoubtDecision:
        raise abort("policy gave up")

    harness = make_harness(
        make_core(scenario=one_turn([FunctionCall("charge", {"order": "o1"})])),
        on_in_doubt=policy,
        shutdown_grace=0.5,
    )
    runs = CallLog()
    harness.runner.function(_counted(runs))
    session_id = harness.create_session()
    key = _in_doubt_elsewhere(harness, session_id)

    report = harness.serve(session_id, timeout=8)

    assert report.in_doubt == [key]
    assert runs.runs == []
    assert _output_of(harness, session_id, key.call_id).error == IN_DOUBT_ERROR


def _unencodable_result() -> Any:
    class Receipt(pydantic.BaseModel):
        charge_id: str = "ch_1"

        @pydantic.computed_field  # type: ignore[prop-decorator]
        @property
        def amount(self) -> int:
            raise RuntimeError("ledger unavailable")

    return Receipt()


def test_an_in_doubt_result_that_cannot_be_encoded_falls_back_instead_of_crashing(
    make_core: MakeCore, make_harness: MakeHarness
) -> None:
    """``InDoubtDecision.result(value)`` is encoded inside the core's round
    (``RunnerCore._decided``), which catches only ``TypeError``/``ValueError``. A value
    whose serialisation raises anything else (here a pydantic computed field raising
    ``RuntimeError``; a function returning the same value gets a failed result) escapes
    the round: the runner fails every serve with ``RunnerError`` and the call is left
    undecided."""
    value = _unencodable_result()
    harness = make_harness(
        make_core(scenario=one_turn([FunctionCall("charge", {"order": "o1"})])),
        on_in_doubt=lambda call: InDoubtDecision.result(value),
        shutdown_grace=0.5,
    )
    runs = CallLog()
    harness.runner.function(_counted(runs))
    session_id = harness.create_session()
    key = _in_doubt_elsewhere(harness, session_id)

    report = harness.serve(session_id, timeout=8)

    assert report.in_doubt == [key]
    assert runs.runs == []
    assert _output_of(harness, session_id, key.call_id).error == IN_DOUBT_ERROR


@pytest.mark.parametrize("hook", ["error_formatter", "on_error"])
def test_a_hook_raising_a_base_exception_after_a_failure_never_reruns_the_function(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour, hook: str
) -> None:
    """The function raised, so its outcome is known; but ``_failed`` guards
    ``error_formatter``/``on_error`` against ``Exception`` only, so a hook raising a
    ``BaseException`` ends the worker without a result: the call is put in doubt and,
    the function being idempotent, run again up to ``max_attempts`` times, each run
    failing the same way, before the model gets "outcome unknown"."""
    runs = CallLog()

    def charge(order: str) -> str:
        """Charge an order."""
        runs.enter("charge", order)
        runs.leave()
        raise ValueError("card declined")

    def broken(*args: Any) -> Any:
        raise _HookAbort("hook gave up")

    core = make_core(scenario=one_turn([FunctionCall("charge", {"order": "o1"})]))
    harness = make_harness(core, shutdown_grace=0.5, **{hook: broken})
    harness.runner.function(idempotent=True)(flavoured(charge, flavour))
    session_id = harness.create_session()

    report = harness.serve(session_id, timeout=10)

    assert len(runs.runs) == 1
    assert report.in_doubt == []
    (call_id,) = core.stored_results(session_id)
    output = _output_of(harness, session_id, call_id)
    assert output.status == "failed"
    assert output.error != IN_DOUBT_ERROR


# -- registration ---------------------------------------------------------------------


def _function_with_parameter(parameter: str) -> Callable[..., str]:
    namespace: dict[str, Any] = {}
    exec(
        f"def lookup({parameter}: int) -> str:\n"
        f"    '''Look a number up.'''\n"
        f"    return repr({parameter})\n",
        namespace,
    )
    function: Callable[..., str] = namespace["lookup"]
    return function


@pytest.mark.parametrize(
    "parameter", ["model_config", "model_fields_set", "model_extra", "_private", "model_dump"]
)
def test_a_parameter_named_like_a_pydantic_attribute_binds_its_value_or_fails_registration(
    parameter: str,
) -> None:
    """The arguments model is built with ``pydantic.create_model`` using the parameters'
    own names, and values are read back with ``getattr``. ``model_config`` becomes the
    model's configuration (the parameter vanishes from the schema, the model's argument
    is refused as an unknown field, and the function receives pydantic's config dict);
    ``model_fields_set``/``model_extra`` are declared but the function receives the
    BaseModel property's value (a set, ``None``) instead of the argument;
    ``_private``/``model_dump`` fail registration with pydantic's own error, which does
    not name the function. Either bind the value or fail naming the function."""
    refused: Exception | None = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pydantic warns of shadowed attributes
            registered = describe_function(_function_with_parameter(parameter))
    except Exception as exc:
        refused = exc
    if refused is not None:
        message = f"{type(refused).__name__}: {refused}"
        assert isinstance(refused, AdmissionError), message
        assert "'lookup'" in message, message
        assert parameter in message, message
        return
    assert parameter in registered.parameters["properties"]
    assert registered.bind({parameter: 5}) == ((), {parameter: 5})


@pytest.mark.parametrize("default", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_a_default_json_cannot_hold_fails_registration(default: float) -> None:
    """A ``float`` default of NaN or Infinity is copied into the declared schema as
    ``"default": NaN``: registration accepts it, and the failure comes later, when the
    tools are sent (httpx refuses with a bare ``ValueError: Out of range float values are
    not JSON compliant`` at Session creation). Registration should refuse it, naming the
    function and the parameter, or leave the default out of the schema."""

    def scale(factor: float = default) -> str:
        """Scale the picture."""
        return str(factor)

    refused: AdmissionError | None = None
    try:
        registered = describe_function(scale)
    except AdmissionError as exc:
        refused = exc
    if refused is not None:
        assert "'scale'" in str(refused)
        assert "factor" in str(refused)
        return
    json.dumps(registered.declaration(), allow_nan=False)


def test_an_async_generator_function_fails_registration() -> None:
    """An ``async def`` with ``yield`` is not a coroutine function, so it is registered
    as a plain function; each call then returns an async generator object, which the
    runner cannot send: the function body never runs and every call fails with a
    generic error. Registration should refuse it, naming the function."""

    async def search(query: str) -> Any:
        """Search the documentation."""
        yield query

    with pytest.raises((TypeError, ValueError), match="search"):
        describe_function(search)


# -- run_turn's output_type -------------------------------------------------------------


class _NotDescribable:
    """A class pydantic has no schema or validator for."""


def test_run_turn_refuses_an_output_type_pydantic_cannot_build_before_the_turn(
    make_core: MakeCore, make_harness: MakeHarness
) -> None:
    """``run_turn`` checks only that the Session answers in JSON before it sends the
    input; ``output_type`` itself is first used by ``parse_turn_output`` after the Turn
    ended. A type pydantic cannot validate makes the Turn run (its functions too) and
    then ``run_turn`` raises ``PydanticSchemaGenerationError``, an undocumented error
    that loses the ``TurnResult``."""

    class Answer(pydantic.BaseModel):
        order: str

    core = make_core(
        scenario=Scenario(
            turns=[TurnScript(), TurnScript(steps=[[FunctionCall("charge", {"order": "o1"})]])]
        )
    )
    harness = make_harness(core)
    runs = CallLog()
    harness.runner.function(_counted(runs))
    session = harness.client.sessions.create(
        agent={
            "model": "scripted",
            "tools": harness.runner.tools,
            "text": structured_output(Answer),
        },
        input="Hello.",
    )
    harness.serve(session.id)

    with pytest.raises((TypeError, ValueError)):
        harness.run_turn(session.id, "Charge o1.", output_type=_NotDescribable)
    assert runs.runs == [], "the Turn ran before output_type was checked"


def test_an_output_validator_raising_is_a_structured_output_error() -> None:
    """``parse_turn_output`` catches only ``pydantic.ValidationError``; a validator of
    the ``output_type`` that raises anything else (pydantic lets ``RuntimeError``,
    ``KeyError``... through) escapes ``run_turn`` after the Turn ended, losing the
    ``TurnResult``. Documented: an answer that does not parse raises
    ``StructuredOutputError`` whose ``result`` keeps the whole ``TurnResult``."""

    class Answer(pydantic.BaseModel):
        city: str

        @pydantic.field_validator("city")
        @classmethod
        def known(cls, city: str) -> str:
            return {"Oslo": "Oslo"}[city]  # KeyError for any other city

    result: TurnResult[Any] = TurnResult(
        session_id="sess_1",
        turn_id="turn_1",
        status="completed",
        text='{"city": "Paris"}',
        output=None,
        report=ServeReport("sess_1"),
    )
    with pytest.raises(StructuredOutputError) as raised:
        parse_turn_output(result, Answer)
    assert raised.value.result.text == '{"city": "Paris"}'
