"""What a call's result looks like on the server: outputs, argument errors, exceptions."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pydantic
import pytest

from openagentcore.local import FunctionCall, LocalCore
from openagentcore.runner import INTERNAL_ERROR
from openagentcore.store import CallKey

from ._support import (
    PAIRED,
    AppliedCall,
    CallLog,
    Flavour,
    Harness,
    applied_calls,
    flavoured,
    one_turn,
)

MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]


# Results are built by the core both runners share: two combinations cover both drivers
# and both kinds of function.
RUNNER_COMBINATIONS = PAIRED


#: A 1x1 PNG, as an inline data URI the server accepts.
PIXEL = (
    "data:image/png;base64,"
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


class Address(pydantic.BaseModel):
    street: str
    postal_code: str


def serve_one(
    make_core: MakeCore,
    make_harness: MakeHarness,
    func: Callable[..., Any],
    arguments: Mapping[str, Any],
    flavour: Flavour,
    *,
    parameters: Any = None,
    **options: Any,
) -> tuple[AppliedCall, dict[str, object]]:
    """Serve a Session whose only call is ``func(**arguments)``.

    Returns the call with its output Item, and the result exactly as submitted.
    """
    name = func.__name__
    harness = make_harness(make_core(scenario=one_turn([FunctionCall(name, arguments)])), **options)
    harness.runner.function(name=name, parameters=parameters)(flavoured(func, flavour))
    session_id = harness.create_session()
    report = harness.serve(session_id)
    assert report.final_status == "idle"
    ((call_id, applied),) = applied_calls(harness.client, session_id).items()
    assert applied.output is not None
    return applied, harness.core.stored_results(session_id)[call_id]


def serve_value(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour, value: object
) -> tuple[AppliedCall, dict[str, object], list[BaseException]]:
    """Serve a Session whose only call's function returns ``value``; also returns what
    ``on_error`` was given."""
    seen: list[BaseException] = []

    def produce() -> object:
        """Produce a value."""
        return value

    applied, result = serve_one(
        make_core,
        make_harness,
        produce,
        {},
        flavour,
        on_error=lambda key, error: seen.append(error),
    )
    return applied, result, seen


@pytest.mark.parametrize(
    ("name", "arguments", "named"),
    [
        ("add", {"a": "sk-secret-123", "b": 2}, "`a`"),
        ("add", {"a": 1}, "`b`"),
        ("ship", {"address": {"street": "sk-secret-123"}}, "`address.postal_code`"),
    ],
    ids=["wrong-type", "missing", "nested"],
)
def test_invalid_arguments_fail_naming_the_field_not_the_value(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    name: str,
    arguments: dict[str, Any],
    named: str,
) -> None:
    log = CallLog()

    def add(a: int, b: int) -> int:
        """Add two integers."""
        log.enter("add", (a, b))
        return a + b

    def ship(address: Address) -> str:
        """Ship to an address."""
        log.enter("ship", address)
        return address.street

    functions: dict[str, Callable[..., Any]] = {"add": add, "ship": ship}
    func = functions[name]
    applied, result = serve_one(make_core, make_harness, func, arguments, flavour)

    assert log.runs == []
    assert result["success"] is False
    error = str(result["error"])
    assert error.startswith("Invalid arguments: ")
    assert named in error
    assert "sk-secret-123" not in error
    assert applied.output is not None
    assert applied.output.status == "failed"
    assert applied.output.error == error


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain text", "plain text"),
        ({"total": 3, "items": ["a", "é"]}, '{"total": 3, "items": ["a", "é"]}'),
        ([1, "two", None], '[1, "two", null]'),
        (Address(street="Main St", postal_code="123"), '{"street":"Main St","postal_code":"123"}'),
        (
            [
                {"type": "input_text", "text": "A pixel"},
                {"type": "input_image", "image_url": PIXEL},
            ],
            [
                {"type": "input_text", "text": "A pixel"},
                {"type": "input_image", "image_url": PIXEL},
            ],
        ),
    ],
    ids=["str", "dict", "list", "pydantic-model", "content-parts"],
)
def test_return_values_become_the_output(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    value: object,
    expected: object,
) -> None:
    def produce() -> object:
        """Produce a value."""
        return value

    applied, result = serve_one(make_core, make_harness, produce, {}, flavour)

    assert result["success"] is True
    assert result["output"] == expected
    assert "error" not in result
    assert applied.output is not None
    assert applied.output.status == "completed"
    wire = applied.output.model_dump(mode="json", exclude_none=True)["output"]
    assert wire == expected


def test_returning_none_leaves_the_output_out(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    def forget(key: str) -> None:
        """Forget a key."""

    applied, result = serve_one(make_core, make_harness, forget, {"key": "k"}, flavour)

    assert result == {
        "type": "agent.session.input.tool_result",
        "turn_id": applied.call.turn_id,
        "call_id": applied.call.call_id,
        "success": True,
    }
    assert applied.output is not None
    assert applied.output.output is None
    assert applied.output.error is None


class CardDeclined(Exception):
    pass


def _pay(card: str) -> str:
    """Pay with a card."""
    raise CardDeclined(f"card {card} declined, key sk-secret-123")


def test_an_exception_sends_generic_text_and_reaches_on_error(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    seen: list[tuple[CallKey, BaseException]] = []

    applied, result = serve_one(
        make_core,
        make_harness,
        _pay,
        {"card": "4242"},
        flavour,
        on_error=lambda key, error: seen.append((key, error)),
    )

    assert result["success"] is False
    assert result["error"] == INTERNAL_ERROR
    assert "output" not in result
    ((key, error),) = seen
    assert key.call_id == applied.call.call_id
    assert isinstance(error, CardDeclined)
    assert applied.output is not None
    assert applied.output.error == INTERNAL_ERROR


def test_error_formatter_opts_in_to_sharing_the_error_text(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    def formatter(error: BaseException) -> str:
        return f"{type(error).__name__}: {str(error).split(',')[0]}"

    _, result = serve_one(
        make_core, make_harness, _pay, {"card": "4242"}, flavour, error_formatter=formatter
    )

    assert result["error"] == "CardDeclined: card 4242 declined"


def _broken_hook(*args: object) -> str:
    raise RuntimeError("hook bug")


@pytest.mark.parametrize(
    ("formatter", "on_error"),
    [
        (_broken_hook, _broken_hook),
        (lambda error: "declined \x00", None),
        (lambda error: 402, None),
        (lambda error: "no such file: bad\udcffname", None),
        (lambda error: "declined " * 60_000, None),
    ],
    ids=["hooks-raise", "nul-in-text", "an-int", "lone-surrogate", "over-the-size-limit"],
)
def test_unusable_hooks_still_send_the_generic_error(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    formatter: Callable[[BaseException], object],
    on_error: Callable[..., object] | None,
) -> None:
    """Hooks that raise, or error text the server would refuse (which would leave the
    call pending for good) or that cannot be sent (a lone surrogate, as a file name
    decoded with ``surrogateescape`` holds; the store refused it and the model got
    "This call cannot be recorded"): the generic text goes instead."""
    _, result = serve_one(
        make_core,
        make_harness,
        _pay,
        {"card": "4242"},
        flavour,
        error_formatter=formatter,
        on_error=on_error,
    )

    assert result["success"] is False
    assert result["error"] == INTERNAL_ERROR


SKU_SCHEMA = {
    "type": "object",
    "properties": {"sku": {"type": "string"}, "count": {"type": "integer"}},
    "required": ["sku"],
}


def _stock(**arguments: Any) -> str:
    """Count stock."""
    return json.dumps(arguments, sort_keys=True)


@pytest.mark.parametrize(
    ("arguments", "success", "text"),
    [
        ({"sku": "ABC", "count": 2}, True, '{"count": 2, "sku": "ABC"}'),
        ({"count": 2}, False, "Invalid arguments: missing required `sku`"),
    ],
    ids=["bound", "missing-required"],
)
def test_a_json_schema_dict_passes_the_arguments_as_keywords(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    arguments: dict[str, Any],
    success: bool,
    text: str,
) -> None:
    _, result = serve_one(
        make_core, make_harness, _stock, arguments, flavour, parameters=SKU_SCHEMA
    )

    assert result["success"] is success
    assert result["output" if success else "error"] == text


def test_a_pydantic_model_passes_one_validated_instance(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    received: list[object] = []

    def label(address: Address) -> str:
        """Print a label."""
        received.append(address)
        return f"{address.street} {address.postal_code}"

    arguments = {"street": "Main St", "postal_code": "123"}
    _, result = serve_one(make_core, make_harness, label, arguments, flavour, parameters=Address)

    assert received == [Address(street="Main St", postal_code="123")]
    assert result["output"] == "Main St 123"


class Opaque:
    """Neither JSON nor content: the runner cannot send it."""


class BrokenParts(list[object]):
    """Looks like content parts, but reading it raises what no encoder expects (before,
    the error escaped and the call that had run was put in doubt)."""

    def __iter__(self) -> Any:
        raise RuntimeError("Opaque parts cannot be read")


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
@pytest.mark.parametrize("value", [Opaque, BrokenParts], ids=["opaque", "raises-when-read"])
def test_a_value_that_cannot_be_sent_fails_the_call_once(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    idempotent: bool,
    value: Callable[[], object],
) -> None:
    seen: list[BaseException] = []
    harness = make_harness(
        make_core(scenario=one_turn([FunctionCall("build", {})])),
        on_error=lambda key, error: seen.append(error),
    )
    log = CallLog()

    def build() -> object:
        """Build something."""
        log.enter("build", None)
        log.leave()
        return value()

    harness.runner.function(idempotent=idempotent)(flavoured(build, flavour))
    session_id = harness.create_session()

    report = harness.serve(session_id)

    # The function ran and its effect happened: the call is not in doubt, and an
    # idempotent one is not run again.
    assert len(log.runs) == 1
    assert report.in_doubt == []
    assert report.function_errors == 1
    ((_, applied),) = applied_calls(harness.client, session_id).items()
    assert applied.output is not None
    assert applied.output.error == INTERNAL_ERROR
    (error,) = seen
    assert "Opaque" in str(error)


@pytest.mark.parametrize(
    ("kilobytes", "success"), [(500, True), (513, False)], ids=["under-limit", "over-limit"]
)
def test_an_output_too_large_for_the_server_fails_the_call_instead_of_sticking(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    kilobytes: int,
    success: bool,
) -> None:
    applied, result, seen = serve_value(make_core, make_harness, flavour, "x" * kilobytes * 1024)

    assert result["success"] is success
    assert applied.output is not None
    if success:
        assert result["output"] == "x" * kilobytes * 1024
        assert seen == []
    else:
        assert result["error"] == INTERNAL_ERROR
        (error,) = seen
        assert "512 KiB" in str(error)


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("nul \x00 byte", "U+0000"),
        ([{"type": "input_image", "image_url": "https://example.com/cat.png"}], "output[0]"),
        ([{"type": "input_image", "image_url": "data:image/gif;base64,R0lGOD"}], "output[0]"),
        ([{"type": "input_text", "text": "a", "extra": 1}], "output[0]"),
    ],
    ids=["nul-in-text", "remote-image", "gif-image", "extra-member"],
)
def test_an_output_the_server_would_refuse_fails_the_call_instead_of_sticking(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    value: object,
    named: str,
) -> None:
    """A refused result never consumes the call: posted as is, it would leave the call
    pending (and the Turn waiting) for good. The runner checks the result as the server
    does, and the model gets a failed result it can act on instead."""
    applied, result, seen = serve_value(make_core, make_harness, flavour, value)

    assert result["success"] is False
    assert result["error"] == INTERNAL_ERROR
    assert applied.output is not None
    assert applied.output.status == "failed"
    (error,) = seen
    assert named in str(error)
