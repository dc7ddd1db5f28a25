"""Defects of function registration and argument handling: a nesting check that was
quadratic on hostile text, coroutines that were never awaited, parameters models whose
schema is a ``$ref``, and validation errors that quoted the model's values."""

from __future__ import annotations

import asyncio
import datetime
import functools
import json
import logging
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from typing import Annotated, Any, Literal

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openagentcore._errors import AdmissionError
from openagentcore.local import FunctionCall, LocalCore
from openagentcore.runner import _json
from openagentcore.runner._json import MAX_JSON_DEPTH, UntrustedJSONError, parse_untrusted_json
from openagentcore.runner._registry import ArgumentsError, describe_function
from openagentcore.runner._results import timeout_error

from ._support import CallLog, Harness, applied_calls, one_turn

# 1. The nesting check is linear in the size of the arguments.


def _depth_by_scanning(text: str) -> int:
    """The deepest nesting of brackets outside strings, one character at a time: the
    plainest reading of what the check computes."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _depth_of_value(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth_of_value(member) for member in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth_of_value(member) for member in value), default=0)
    return 0


_HOSTILE_CHECK = textwrap.dedent(
    """
    import signal, sys, time
    from openagentcore.runner._json import UntrustedJSONError, parse_untrusted_json

    def too_slow(signum, frame):
        raise TimeoutError

    opening = "[" * 65 + '"'
    text = opening + '\\\\"' * ((1024 * 1024 - len(opening)) // 2)  # 1 MiB, unterminated
    signal.signal(signal.SIGALRM, too_slow)
    signal.setitimer(signal.ITIMER_REAL, float(sys.argv[1]))
    try:
        parse_untrusted_json(text)
    except UntrustedJSONError as exc:
        print(exc)
    except TimeoutError:
        print("still checking")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)  # the bound is the check's, not the exit's
    """
)


def test_a_mebibyte_of_escaped_quotes_is_checked_at_once() -> None:
    """An unterminated string of escaped quotes made the check quadratic (1 MiB took
    more than an hour, on the async runner's event loop). The check runs in a child
    process that interrupts it after a bound thousands of times what it needs."""
    checked = subprocess.run(
        [sys.executable, "-c", _HOSTILE_CHECK, "2.0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert checked.stdout.strip() == f"nested deeper than {MAX_JSON_DEPTH} levels"


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab'),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(st.text(alphabet='[]{}"\\ab', max_size=3), inner, max_size=3)
        ),
        max_leaves=120,
    )
)
def test_the_nesting_check_agrees_with_the_parsed_depth(value: Any) -> None:
    text = json.dumps(value)
    assert _depth_by_scanning(text) == _depth_of_value(value)
    if _depth_of_value(value) > MAX_JSON_DEPTH:
        with pytest.raises(UntrustedJSONError, match="nested deeper"):
            parse_untrusted_json(text)
    else:
        assert parse_untrusted_json(text) == value


@settings(max_examples=500, deadline=None)
@given(
    st.text(alphabet='[]{}"\\a,', max_size=400)
    | st.tuples(st.integers(60, 70), st.text(alphabet='[]{}"\\a', max_size=200)).map(
        lambda opened_then: "[" * opened_then[0] + opened_then[1]
    )
)
def test_the_nesting_check_agrees_with_a_plain_scan_on_any_text(text: str) -> None:
    assert _json._nests_too_deep(text) == (_depth_by_scanning(text) > MAX_JSON_DEPTH)


# 4. Errors about the arguments name fields, never values.

CARD = "4111111111111111"


class Card(pydantic.BaseModel):
    number: str
    holder: str = ""

    @pydantic.field_validator("number")
    @classmethod
    def passes_luhn(cls, number: str) -> str:
        raise ValueError(f"{number} fails the Luhn check")


class Cat(pydantic.BaseModel):
    kind: Literal["cat"]


class Dog(pydantic.BaseModel):
    kind: Literal["dog"]


def _not_the_card(text: str) -> str:
    assert text != CARD, f"got {text}"
    return text


def _known_reference(text: str) -> str:
    if text == CARD:
        raise LookupError(f"no reference {text}")  # not a ValueError: pydantic passes it on
    return text


def pay(
    card: Card | None = None,
    amounts: dict[str, int] | None = None,
    pet: Annotated[Cat | Dog, pydantic.Field(discriminator="kind")] | None = None,
    cents: int = 0,
    note: Annotated[str, pydantic.AfterValidator(_not_the_card)] = "",
    when: datetime.datetime | None = None,
    reference: Annotated[str, pydantic.AfterValidator(_known_reference)] = "",
) -> str:
    """Pay an order."""
    return "paid"


_INVALID_CARD_ARGUMENTS = [
    {"card": {"number": CARD}},
    {"amounts": {CARD: "ten"}},
    {"pet": {"kind": CARD}},
    {"cents": CARD + "x"},
    {"note": CARD},
    {"when": CARD + "x"},
]
#: With a validator that raises something other than ValueError, which pydantic passes on.
_CARD_ARGUMENTS = [*_INVALID_CARD_ARGUMENTS, {"reference": CARD}]


@pytest.mark.parametrize("arguments", _INVALID_CARD_ARGUMENTS, ids=lambda a: next(iter(a)))
def test_a_validation_error_names_the_field_without_the_value(arguments: dict[str, Any]) -> None:
    registered = describe_function(pay)
    with pytest.raises(ArgumentsError) as raised:
        registered.bind(arguments)
    text = str(raised.value)
    assert CARD not in text
    assert f"`{next(iter(arguments))}" in text


def test_the_model_and_the_log_never_see_a_bad_argument_value(
    make_core: Callable[..., LocalCore],
    make_harness: Callable[..., Harness],
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = [FunctionCall("pay", arguments) for arguments in _CARD_ARGUMENTS]
    harness = make_harness(make_core(scenario=one_turn(calls)))
    harness.runner.function(pay)
    session_id = harness.create_session()
    with caplog.at_level(logging.DEBUG, logger="openagentcore"):
        report = harness.serve(session_id)
    assert report.calls_run == 0
    applied = applied_calls(harness.client, session_id)
    errors = [call.output.error for call in applied.values() if call.output is not None]
    assert len(errors) == len(_CARD_ARGUMENTS)
    assert all(error and error.startswith("Invalid arguments: ") for error in errors)
    assert not [error for error in errors if error and CARD in error]
    logged = [record for record in caplog.records if record.name.startswith("openagentcore.runner")]
    assert any("do not fit" in record.getMessage() for record in logged)
    assert CARD not in caplog.text


# 3. A parameters model whose schema is a $ref (it refers to itself) or a RootModel.


class Node(pydantic.BaseModel):
    name: str
    children: list[Node] = []


class Scores(pydantic.RootModel[dict[str, int]]):
    pass


class Tree(pydantic.RootModel[Node]):
    pass


class Numbers(pydantic.RootModel[list[int]]):
    pass


def _count(node: Node) -> int:
    return 1 + sum(_count(child) for child in node.children)


def count_nodes(tree: Node) -> int:
    """Count the nodes of a tree."""
    return _count(tree)


def test_a_self_referencing_model_is_declared_as_an_object_and_binds() -> None:
    registered = describe_function(count_nodes, parameters=Node)
    schema = registered.parameters
    assert "$ref" not in schema
    assert schema["type"] == "object"
    assert set(schema["properties"]) == {"name", "children"}
    assert schema["required"] == ["name"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}
    assert set(schema["$defs"]) == {"Node"}
    arguments = {"name": "root", "children": [{"name": "leaf", "children": []}]}
    ((node,), _) = registered.bind(arguments)
    assert node == Node.model_validate(arguments)
    with pytest.raises(ArgumentsError, match=r"^Invalid arguments: unknown field `x`$"):
        registered.bind({**arguments, "x": 1})
    with pytest.raises(ArgumentsError, match=r"`children\.0\.name`: Field required"):
        registered.bind({"name": "root", "children": [{}]})


def test_root_models_validate_with_their_own_schema() -> None:
    def total(scores: Scores) -> int:
        """Add up scores."""
        return sum(scores.root.values())

    scores = describe_function(total, parameters=Scores)
    assert scores.parameters["additionalProperties"] == {"type": "integer"}
    ((bound,), _) = scores.bind({"ada": 3, "bob": 4})
    assert bound == Scores({"ada": 3, "bob": 4})
    with pytest.raises(ArgumentsError, match=r"^Invalid arguments: `\*`: Input should be"):
        scores.bind({"ada": "three"})

    tree = describe_function(count_nodes, parameters=Tree)
    assert "$ref" not in tree.parameters
    assert tree.parameters["type"] == "object"
    ((root,), _) = tree.bind({"name": "root", "children": [{"name": "leaf"}]})
    assert root == Tree(Node(name="root", children=[Node(name="leaf")]))


def test_a_model_that_is_not_an_object_is_refused_at_registration() -> None:
    def first(numbers: Numbers) -> int:
        """The first number."""
        return numbers.root[0]

    with pytest.raises(AdmissionError, match=r"Numbers.*array.*JSON object"):
        describe_function(first, parameters=Numbers)


def test_a_self_referencing_parameters_model_runs_end_to_end(
    make_core: Callable[..., LocalCore], make_harness: Callable[..., Harness]
) -> None:
    tree = {"name": "root", "children": [{"name": "a"}, {"name": "b", "children": [{"name": "c"}]}]}
    core = make_core(
        scenario=one_turn(
            [
                FunctionCall("count_nodes", tree),
                FunctionCall("count_nodes", {"name": "root", "children": [{"children": []}]}),
            ]
        )
    )
    harness = make_harness(core)
    harness.runner.function(parameters=Node)(count_nodes)
    session_id = harness.create_session()
    report = harness.serve(session_id)
    assert report.calls_run == 1
    outputs = {
        json.dumps(call.arguments): call.output
        for call in applied_calls(harness.client, session_id).values()
    }
    valid = outputs[json.dumps(tree)]
    assert valid is not None
    assert valid.output == "4"
    invalid = outputs[json.dumps({"name": "root", "children": [{"children": []}]})]
    assert invalid is not None
    assert invalid.error == "Invalid arguments: `children.0.name`: Field required"


# 2. Coroutines behind wrappers, callable objects and partials are awaited.


def _passing_through(func: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator unaware of coroutines: its wrapper returns what the function returns."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


def _run_to_completion(func: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator that makes a coroutine function a plain one (as asgiref's
    ``async_to_sync`` does): its ``__wrapped__`` is a coroutine function, yet calling
    it blocks and returns the value, and it cannot run on a running event loop."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(func(*args, **kwargs))

    return wrapper


class Greeter:
    """Greet a person."""

    def __init__(self, greeting: str, ran: CallLog) -> None:
        self.greeting = greeting
        self.ran = ran

    async def __call__(self, person: str, times: int = 1) -> str:
        """Greet once or more.

        Args:
            person: Who to greet.
            times: How often.
        """
        await asyncio.sleep(0)
        self.ran.enter("greet", person)
        self.ran.leave()
        return " ".join([f"{self.greeting} {person}"] * times)


class Shouter:
    """Shout at a person."""

    def __call__(self, person: str, times: int = 1) -> str:
        return " ".join([person.upper()] * times)


async def _convert(amount: int, currency: str, rate: float) -> str:
    """Convert an amount of money."""
    await asyncio.sleep(0)
    return f"{amount * rate:.2f} {currency}"


def _scale(value: int, factor: int) -> int:
    """Scale a value."""
    return value * factor


def test_callable_objects_and_partials_declare_their_real_parameters() -> None:
    greeter = describe_function(Greeter("Hello", CallLog()), name="greet")
    assert greeter.is_async
    assert greeter.description == "Greet a person."
    assert greeter.parameters["properties"] == {
        "person": {"type": "string", "description": "Who to greet."},
        "times": {"type": "integer", "default": 1, "description": "How often."},
    }
    assert greeter.bind({"person": "Ada", "times": "2"}) == ((), {"person": "Ada", "times": 2})
    shouter = describe_function(Shouter())
    assert shouter.name == "Shouter"
    assert not shouter.is_async
    assert shouter.parameters["properties"]["times"] == {"type": "integer", "default": 1}

    convert = describe_function(functools.partial(_convert, rate=1.1), name="convert")
    assert convert.is_async
    assert convert.description == "Convert an amount of money."
    assert convert.parameters["properties"] == {
        "amount": {"type": "integer"},
        "currency": {"type": "string"},
    }
    with pytest.raises(ArgumentsError, match="unknown field `rate`"):
        convert.bind({"amount": 1, "currency": "EUR", "rate": 5})
    scale = describe_function(functools.partial(_scale, 3))
    assert scale.name == "_scale"
    assert scale.parameters["properties"] == {"factor": {"type": "integer"}}
    assert scale.parameters["required"] == ["factor"]


def test_wrapped_coroutines_callable_objects_and_partials_run(
    make_core: Callable[..., LocalCore], make_harness: Callable[..., Harness]
) -> None:
    core = make_core(
        scenario=one_turn(
            [
                FunctionCall("wrapped", {"x": 2}),
                FunctionCall("greet", {"person": "Ada", "times": 2}),
                FunctionCall("shout", {"person": "Bob"}),
                FunctionCall("convert", {"amount": 10, "currency": "EUR"}),
                FunctionCall("converted", {"x": 5}),
            ]
        )
    )
    harness = make_harness(core)
    ran = CallLog()

    async def wrapped(x: int) -> int:
        """Double a number."""
        await asyncio.sleep(0)
        ran.enter("wrapped", x)
        ran.leave()
        return x * 2

    async def converted(x: int) -> int:
        """Triple a number."""
        await asyncio.sleep(0)
        ran.enter("converted", x)
        ran.leave()
        return x * 3

    harness.runner.function(_passing_through(wrapped))
    harness.runner.function(Greeter("Hello", ran), name="greet")
    harness.runner.function(Shouter(), name="shout")
    harness.runner.function(functools.partial(_convert, rate=1.5), name="convert")
    harness.runner.function(_run_to_completion(converted))
    session_id = harness.create_session()
    report = harness.serve(session_id)
    outputs = {
        call.call.name: call.output for call in applied_calls(harness.client, session_id).values()
    }
    assert {name: output and (output.output, output.error) for name, output in outputs.items()} == {
        "wrapped": ("4", None),
        "greet": ("Hello Ada Hello Ada", None),
        "shout": ("BOB", None),
        "convert": ("15.00 EUR", None),
        "converted": ("15", None),
    }
    assert sorted(ran.runs) == [("converted", 5), ("greet", "Ada"), ("wrapped", 2)]
    assert report.function_errors == 0


def test_a_coroutine_a_plain_function_returns_is_cancelled_past_its_timeout(
    make_core: Callable[..., LocalCore], make_harness: Callable[..., Harness]
) -> None:
    harness = make_harness(make_core(scenario=one_turn([FunctionCall("fetch", {})])))
    cancelled = threading.Event()

    async def fetch() -> str:
        """Fetch something that never arrives."""
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "arrived"

    harness.runner.function(timeout=0.3)(_passing_through(fetch))
    session_id = harness.create_session()
    report = harness.serve(session_id, timeout=30)
    assert report.final_status == "idle"
    assert cancelled.wait(10)
    (call,) = applied_calls(harness.client, session_id).values()
    assert call.output is not None
    assert call.output.error == timeout_error(0.3, idempotent=False)
