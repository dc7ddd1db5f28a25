"""Registration v2: docstrings parsed by a library, strict arguments, untrusted JSON,
per-function options and the CallContext parameter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import pydantic
import pytest

from openagentcore import Client
from openagentcore._admission import check_session_config, check_tools
from openagentcore._errors import AdmissionError
from openagentcore.local import FunctionCall, LocalCore
from openagentcore.runner import FunctionRunner, _json
from openagentcore.runner._context import CallContext, new_call_context
from openagentcore.runner._json import OutputEncodingError, encode_output
from openagentcore.runner._registry import ArgumentsError, describe_function
from openagentcore.store import MemoryResultStore

from ._support import (
    PAIRED,
    CallLog,
    Flavour,
    Harness,
    RunnerKind,
    applied_calls,
    flavoured,
    one_turn,
)

RUNNER_COMBINATIONS = PAIRED


def returns_first(city: str, days: int = 3) -> str:
    """Forecast the weather.

    Returns:
        The forecast text.

    Args:
        city: The city to forecast.
        days: How many days ahead.
    """
    return ""


def example_first(city: str, days: int = 3) -> str:
    """Forecast the weather.

    Example:
        >>> example_first("Paris")
        'sunny'

    Args:
        city: The city to forecast.
        days: How many days ahead.
    """
    return ""


def numpy_returns_first(city: str, days: int = 3) -> str:
    """Forecast the weather.

    Returns
    -------
    str
        The forecast text.

    Parameters
    ----------
    city : str
        The city to forecast.
    days : int
        How many days ahead.
    """
    return ""


def sphinx_returns_first(city: str, days: int = 3) -> str:
    """Forecast the weather.

    :returns: The forecast text.
    :param city: The city to forecast.
    :param days: How many days ahead.
    """
    return ""


@pytest.mark.parametrize(
    "func",
    [returns_first, example_first, numpy_returns_first, sphinx_returns_first],
    ids=["google-returns", "google-example", "numpy-returns", "sphinx-returns"],
)
def test_a_section_before_args_keeps_the_parameter_descriptions(
    func: Callable[..., str],
) -> None:
    schema = describe_function(func).parameters
    assert schema["properties"]["city"]["description"] == "The city to forecast."
    assert schema["properties"]["days"]["description"] == "How many days ahead."
    assert describe_function(func).description == "Forecast the weather."


def test_description_precedence_field_then_annotated_then_docstring() -> None:
    def greet(
        a: Annotated[str, pydantic.Field(description="From Field.")],
        b: Annotated[str, "From Annotated."],
        c: str,
        d: Annotated[str, "From Annotated.", pydantic.Field(description="From Field.")],
    ) -> str:
        """Greet someone.

        Args:
            a: From the docstring.
            b: From the docstring.
            c: From the docstring.
            d: From the docstring.
        """
        return ""

    properties = describe_function(greet).parameters["properties"]
    assert {name: p["description"] for name, p in properties.items()} == {
        "a": "From Field.",
        "b": "From Annotated.",
        "c": "From the docstring.",
        "d": "From Field.",
    }


def test_a_long_description_keeps_its_paragraphs() -> None:
    def ship(parcel: str) -> str:
        """Ship a parcel.

        The courier picks it up
        within a day.

        Args:
            parcel: What to ship.
        """
        return ""

    registered = describe_function(ship)
    assert registered.description == "Ship a parcel.\n\nThe courier picks it up\nwithin a day."
    assert registered.parameters["properties"]["parcel"]["description"] == "What to ship."


# Strict arguments.


def book(city: str, nights: int = 1) -> str:
    """Book a hotel."""
    return f"{city}:{nights}"


def test_schemas_forbid_fields_the_signature_does_not_name() -> None:
    assert describe_function(book).parameters["additionalProperties"] is False


def test_an_unknown_argument_fails_the_call_instead_of_being_dropped() -> None:
    registered = describe_function(book)
    with pytest.raises(ArgumentsError) as raised:
        registered.bind('{"city": "Oslo", "x": 1}')
    assert str(raised.value) == "Invalid arguments: unknown field `x`"


def test_strict_false_restores_lenient_binding() -> None:
    registered = describe_function(book, strict=False)
    assert "additionalProperties" not in registered.parameters
    assert registered.bind('{"city": "Oslo", "x": 1}') == ((), {"city": "Oslo", "nights": 1})


class Stay(pydantic.BaseModel):
    city: str
    guest_name: str = pydantic.Field(alias="guest")


def test_a_parameters_model_is_strict_at_the_top_level_too() -> None:
    def reserve(stay: Stay) -> str:
        """Reserve a stay."""
        return stay.city

    registered = describe_function(reserve, parameters=Stay)
    assert registered.parameters["additionalProperties"] is False
    ((stay,), _) = registered.bind({"city": "Oslo", "guest": "Ada"})
    assert stay == Stay(city="Oslo", guest="Ada")
    with pytest.raises(ArgumentsError, match=r"^Invalid arguments: unknown field `x`$"):
        registered.bind({"city": "Oslo", "guest": "Ada", "x": 1})
    lenient = describe_function(reserve, parameters=Stay, strict=False)
    assert "additionalProperties" not in lenient.parameters
    assert lenient.bind({"city": "Oslo", "guest": "Ada", "x": 1})[0][0].city == "Oslo"


def test_a_parameters_dict_is_strict_when_it_forbids_additional_properties() -> None:
    schema = {
        "type": "object",
        "properties": {"sku": {"type": "string"}},
        "required": ["sku"],
        "additionalProperties": False,
    }

    def stock(**arguments: Any) -> int:
        return 0

    registered = describe_function(stock, parameters=schema, description="Count stock.")
    assert registered.parameters == schema
    with pytest.raises(ArgumentsError, match="unknown field `x`"):
        registered.bind({"sku": "ABC", "x": 1})
    open_schema = {k: v for k, v in schema.items() if k != "additionalProperties"}
    lenient = describe_function(stock, parameters=open_schema, description="Count stock.")
    assert lenient.bind({"sku": "ABC", "x": 1}) == ((), {"sku": "ABC", "x": 1})


def test_the_runner_fails_an_unknown_argument_without_calling_the_function(
    make_core: Callable[..., LocalCore], runner_kind: RunnerKind, flavour: Flavour
) -> None:
    """The model is told which field is unknown; a lenient function gets the call."""
    core = make_core(
        scenario=one_turn(
            [
                FunctionCall("book", {"city": "Oslo", "x": 1}),
                FunctionCall("browse", {"city": "Oslo", "x": 1}),
            ]
        )
    )
    harness = Harness(core, runner_kind)
    log = CallLog()

    def book(city: str) -> str:
        """Book a hotel."""
        log.enter("book", city)
        log.leave()
        return "booked"

    def browse(city: str) -> str:
        """Browse hotels."""
        log.enter("browse", city)
        log.leave()
        return "browsed"

    try:
        harness.runner.function(flavoured(book, flavour))
        harness.runner.function(strict=False)(flavoured(browse, flavour))
        session_id = harness.create_session()
        report = harness.serve(session_id)
        calls = {
            applied.call.name: applied
            for applied in applied_calls(harness.client, session_id).values()
        }
        assert calls["book"].output is not None
        assert calls["book"].output.error == "Invalid arguments: unknown field `x`"
        assert calls["browse"].output is not None
        assert calls["browse"].output.output == "browsed"
        assert log.runs == [("browse", "Oslo")]
        assert report.calls_run == 1  # book never ran: its arguments were refused
    finally:
        harness.close()


def test_the_admission_rules_accept_strict_schemas() -> None:
    """execution-tools.md (Functions): ``parameters`` is a JSON Schema; the local
    admission rules accept a closed object for Agents and Sessions alike."""
    registered = describe_function(book)
    check_tools([registered.declaration()], for_session=True)
    check_session_config(tools=[registered.declaration()])


class Unknown:
    """An arbitrary class pydantic has no schema for."""


def _takes_a_class(thing: Unknown, count: int = 1) -> str:
    """Inspect a thing."""
    return ""


def _takes_callables(count: int, thing: list[Callable[[int], int]]) -> str:
    """Apply things."""
    return ""


@pytest.mark.parametrize(
    ("func", "shown"),
    [(_takes_a_class, "type Unknown,"), (_takes_callables, "type list[Callable[[int], int]],")],
    ids=["arbitrary-class", "callables"],
)
def test_a_type_pydantic_cannot_express_names_the_function_and_parameter(
    func: Callable[..., str], shown: str
) -> None:
    with pytest.raises(AdmissionError) as raised:
        describe_function(func)
    message = str(raised.value)
    assert f"Function {func.__name__!r}: parameter 'thing' has type" in message
    assert shown in message
    assert "arbitrary_types_allowed" not in message
    assert raised.value.tool == func.__name__
    assert raised.value.field == "parameters.thing"


def test_var_keyword_parameters_are_named_with_two_stars() -> None:
    def configure(**options: str) -> str:
        """Take options."""
        return ""

    with pytest.raises(AdmissionError) as raised:
        describe_function(configure)
    assert "takes **options;" in str(raised.value)


def test_an_unresolvable_type_hint_names_the_function() -> None:
    def late(thing: NotDefinedAnywhere) -> str:  # type: ignore[name-defined]  # noqa: F821
        """Refer to a missing type."""
        return ""

    with pytest.raises(AdmissionError, match="'late' has type hints that cannot be resolved"):
        describe_function(late)


# Untrusted argument JSON.


def nested(depth: int) -> str:
    return '{"city": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (nested(1000), "nested deeper than 64 levels"),
        (nested(100_000), "nested deeper than 64 levels"),
        ('{"city": "\\ud800"}', "lone UTF-16 surrogate"),
        ('{"city": "ok", "\\udfff": 1}', "lone UTF-16 surrogate"),
        ('{"city": NaN}', "NaN is not a JSON number"),
        ('{"city": Infinity}', "Infinity is not a JSON number"),
        ('{"city": -Infinity}', "-Infinity is not a JSON number"),
        ('{"city": 1e999}', "NaN and Infinity are not JSON numbers"),
        ('{"city": ' + "1" * 5000 + "}", "not valid JSON"),
        ('{"city": "' + "x" * (1024 * 1024) + '"}', "larger than 1048576 bytes"),
        ('{"city": ', "not valid JSON"),
    ],
    ids=[
        "deep-1000",
        "deep-100000",
        "surrogate-value",
        "surrogate-key",
        "nan",
        "infinity",
        "minus-infinity",
        "overflow",
        "long-integer",
        "too-large",
        "truncated",
    ],
)
def test_hostile_argument_json_is_an_arguments_error(arguments: str, words: str) -> None:
    registered = describe_function(book, strict=False)
    with pytest.raises(ArgumentsError) as raised:
        registered.bind(arguments)
    assert str(raised.value).startswith("Invalid arguments: ")
    assert words in str(raised.value)


def test_hostile_decoded_arguments_are_an_arguments_error() -> None:
    registered = describe_function(book, strict=False)
    deep: Any = "Oslo"
    for _ in range(1000):
        deep = [deep]
    for arguments in ({"city": deep}, {"city": "\ud800"}, {"city": float("nan")}):
        with pytest.raises(ArgumentsError, match=r"^Invalid arguments: "):
            registered.bind(arguments)


def test_arguments_within_the_limits_bind() -> None:
    registered = describe_function(book, strict=False)
    ok = '{"city": "Zürich \\u00e9 😀", "deep": ' + "[" * 60 + "]" * 60 + ', "s": "[[[["}'
    assert registered.bind(ok) == ((), {"city": "Zürich é 😀", "nights": 1})


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    registered = describe_function(book)
    text = '{"city": "' + "[{" * 500 + '\\"' + "[" * 100 + '"}'
    assert registered.bind(text)[1]["city"] == "[{" * 500 + '"' + "[" * 100


def test_the_size_limit_is_a_module_constant(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_json, "MAX_ARGUMENTS_BYTES", 32)
    registered = describe_function(book)
    assert registered.bind('{"city": "Oslo"}')[1]["city"] == "Oslo"
    with pytest.raises(ArgumentsError, match="larger than 32 bytes"):
        registered.bind('{"city": "' + "é" * 16 + '"}')  # 16 characters, 32 bytes + JSON


# Result output encoding.


class Reply(pydantic.BaseModel):
    text: str
    score: float = 0.0


#: What the runner sent for each value before results were checked (its earlier
#: ``_results._output``): stored results must stay byte for byte the same.
_EARLIER_BYTES: list[tuple[object, object]] = [
    ("plain text", "plain text"),
    ({"a": [1, 2.5, None], "é": "ü"}, '{"a": [1, 2.5, null], "é": "ü"}'),
    ([1, 2, 3], "[1, 2, 3]"),
    (Reply(text="hi", score=1.5), '{"text":"hi","score":1.5}'),
    ({"type": "input_text", "text": "part"}, [{"type": "input_text", "text": "part"}]),
    (
        [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
        [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
    ),
    (7, "7"),
]


@pytest.mark.parametrize(("value", "expected"), _EARLIER_BYTES)
def test_encode_output_matches_the_earlier_bytes_for_ordinary_values(
    value: object, expected: object
) -> None:
    assert encode_output(value) == expected


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (float("nan"), "NaN and Infinity"),
        ({"x": float("inf")}, "NaN and Infinity"),
        ("\ud800", "lone UTF-16 surrogate"),
        ({"text": "\udfff"}, "lone UTF-16 surrogate"),
        ({"type": "input_text", "text": "\ud800"}, "lone UTF-16 surrogate"),
        (Reply(text="\ud800"), "lone UTF-16 surrogate"),
        (Unknown(), "Unknown"),
    ],
    ids=["nan", "inf", "surrogate", "nested-surrogate", "part", "model", "unknown-type"],
)
def test_encode_output_refuses_what_the_server_could_not_take(value: object, words: str) -> None:
    with pytest.raises(OutputEncodingError) as raised:
        encode_output(value)
    assert words in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_encode_output_refuses_deep_values_without_recursion_error() -> None:
    deep: Any = "leaf"
    for _ in range(5000):
        deep = {"k": deep}
    with pytest.raises(OutputEncodingError):
        encode_output(deep)


# Per-function options.


def test_options_are_stored_for_the_runner() -> None:
    registered = describe_function(
        book, timeout=2.5, max_concurrency=2, max_attempts=5, idempotent=True
    )
    assert (registered.timeout, registered.max_concurrency, registered.max_attempts) == (
        2.5,
        2,
        5,
    )
    default = describe_function(book)
    assert (default.timeout, default.max_concurrency, default.max_attempts) == (None, None, 3)
    assert default.strict is True


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"timeout": 0}, "timeout must be a positive number"),
        ({"timeout": -1.0}, "timeout must be a positive number"),
        ({"timeout": float("inf")}, "timeout must be a positive number"),
        ({"timeout": "5"}, "timeout must be a positive number"),
        ({"max_concurrency": 0}, "max_concurrency must be a whole number"),
        ({"max_concurrency": 1.5}, "max_concurrency must be a whole number"),
        ({"max_concurrency": True}, "max_concurrency must be a whole number"),
        ({"max_attempts": 0}, "max_attempts must be a whole number"),
    ],
)
def test_invalid_options_name_the_function(options: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words) as raised:
        describe_function(book, **options)
    assert "'book'" in str(raised.value)


def test_the_runner_decorator_passes_the_options_through() -> None:
    client = Client(api_key="sk-test-unused", base_url="http://127.0.0.1:9/v1")
    with client, FunctionRunner(client, store=MemoryResultStore()) as runner:

        @runner.function(strict=False, timeout=1.5, max_concurrency=4, max_attempts=2)
        def lookup(word: str) -> str:
            """Look a word up."""
            return word

        registered = runner._registry.get("lookup")
        assert registered is not None
        assert (registered.strict, registered.timeout) == (False, 1.5)
        assert (registered.max_concurrency, registered.max_attempts) == (4, 2)
        assert "additionalProperties" not in runner.tools[0]["parameters"]


# The CallContext parameter.


def context_for(name: str) -> CallContext:
    return new_call_context("sess_1", "turn_1", "call_1", name)


def test_a_call_context_parameter_is_injected_and_never_declared() -> None:
    def pay(amount: int, ctx: CallContext) -> str:
        """Charge a card."""
        return ctx.idempotency_key

    registered = describe_function(pay)
    assert registered.context_parameter == "ctx"
    assert registered.parameters["properties"] == {"amount": {"type": "integer"}}
    assert registered.parameters["required"] == ["amount"]
    context = context_for("pay")
    args, kwargs = registered.bind('{"amount": 5}', context=context)
    assert kwargs == {"amount": 5, "ctx": context}
    assert pay(*args, **kwargs) == context.idempotency_key


def test_the_model_cannot_supply_the_context_parameter() -> None:
    def pay(amount: int, call: Annotated[CallContext, "the call"]) -> None:
        """Charge a card."""

    registered = describe_function(pay)
    assert registered.context_parameter == "call"
    assert "call" not in registered.parameters["properties"]
    with pytest.raises(ArgumentsError, match="unknown field `call`"):
        registered.bind('{"amount": 5, "call": {}}', context=context_for("pay"))


def test_a_context_parameter_works_with_a_parameters_model() -> None:
    def reserve(stay: Stay, ctx: CallContext) -> str:
        """Reserve a stay."""
        return ctx.call_id

    registered = describe_function(reserve, parameters=Stay)
    context = context_for("reserve")
    args, kwargs = registered.bind({"city": "Oslo", "guest": "Ada"}, context=context)
    assert reserve(*args, **kwargs) == "call_1"


def test_binding_without_a_context_is_a_programming_error() -> None:
    def pay(amount: int, ctx: CallContext) -> None:
        """Charge a card."""

    with pytest.raises(TypeError, match="pass context="):
        describe_function(pay).bind('{"amount": 5}')


def test_functions_without_a_context_parameter_ignore_the_context() -> None:
    registered = describe_function(book)
    assert registered.context_parameter is None
    assert registered.bind('{"city": "Oslo"}', context=context_for("book")) == (
        (),
        {"city": "Oslo", "nights": 1},
    )


def test_context_parameter_mistakes_are_refused_at_registration() -> None:
    def twice(a: CallContext, b: CallContext) -> None:
        """Two contexts."""

    def optional(ctx: CallContext | None = None) -> None:
        """An optional context."""

    with pytest.raises(AdmissionError, match="more than one CallContext"):
        describe_function(twice)
    with pytest.raises(AdmissionError, match="annotate it as plain CallContext"):
        describe_function(optional)
