"""Registering functions: the declarations the model sees, and what registration refuses."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal, Optional

import pydantic
import pytest

from openagentcore import Client
from openagentcore._errors import AdmissionError
from openagentcore.runner import FunctionRunner
from openagentcore.store import MemoryResultStore


@pytest.fixture
def runner() -> Iterator[FunctionRunner]:
    """A runner that is only registered with, never served: its client sends nothing."""
    client = Client(api_key="sk-test-unused", base_url="http://127.0.0.1:9/v1")
    with client, FunctionRunner(client, store=MemoryResultStore()) as made:
        yield made


def parameters_of(runner: FunctionRunner, name: str) -> dict[str, Any]:
    (tool,) = (tool for tool in runner.tools if tool.get("name") == name)
    parameters: dict[str, Any] = tool["parameters"]
    return parameters


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(pydantic.BaseModel):
    street: str
    postal_code: str = pydantic.Field(description="Digits only.")


def test_schema_comes_from_type_hints(runner: FunctionRunner) -> None:
    @runner.function
    def ship(
        address: Address,
        color: Color,
        speed: Literal["slow", "fast"],
        note: Optional[str] = None,  # noqa: UP045 (the typing spelling must work too)
        gift: bool | None = None,
        count: int = 1,
        weight: Annotated[float, pydantic.Field(description="Kilograms.", gt=0)] = 1.0,
        label: Annotated[str, "Printed on the box."] = "",
    ) -> str:
        """Ship a parcel.

        The courier picks it up within a day.
        """
        return "shipped"

    (tool,) = runner.tools
    assert tool["type"] == "function"
    assert tool["name"] == "ship"
    assert tool["description"] == "Ship a parcel.\n\nThe courier picks it up within a day."
    assert "defer_loading" not in tool
    schema = tool["parameters"]
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["address", "color", "speed"]
    properties = schema["properties"]
    assert list(properties) == [
        "address",
        "color",
        "speed",
        "note",
        "gift",
        "count",
        "weight",
        "label",
    ]
    assert properties["address"] == {"$ref": "#/$defs/Address"}
    assert schema["$defs"]["Address"] == {
        "type": "object",
        "properties": {
            "street": {"type": "string"},
            "postal_code": {"type": "string", "description": "Digits only."},
        },
        "required": ["street", "postal_code"],
    }
    assert properties["color"] == {"$ref": "#/$defs/Color"}
    assert schema["$defs"]["Color"] == {"type": "string", "enum": ["red", "blue"]}
    assert properties["speed"] == {"type": "string", "enum": ["slow", "fast"]}
    assert properties["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    assert properties["gift"] == {"anyOf": [{"type": "boolean"}, {"type": "null"}], "default": None}
    assert properties["count"] == {"type": "integer", "default": 1}
    assert properties["weight"] == {
        "type": "number",
        "default": 1.0,
        "exclusiveMinimum": 0,
        "description": "Kilograms.",
    }
    assert properties["label"] == {
        "type": "string",
        "default": "",
        "description": "Printed on the box.",
    }


def google(city: str, days: int = 3) -> str:
    """Forecast the weather.

    Args:
        city: The city to forecast,
            spelled in English.
        days (int): How many days ahead.

    Returns:
        The forecast text.
    """
    return ""


def numpy(city: str, days: int = 3) -> str:
    """Forecast the weather.

    Parameters
    ----------
    city : str
        The city to forecast,
        spelled in English.
    days : int, optional
        How many days ahead.

    Returns
    -------
    str
    """
    return ""


def sphinx(city: str, days: int = 3) -> str:
    """Forecast the weather.

    :param city: The city to forecast,
        spelled in English.
    :param int days: How many days ahead.
    :returns: The forecast text.
    """
    return ""


@pytest.mark.parametrize("func", [google, numpy, sphinx], ids=["google", "numpy", "sphinx"])
def test_docstring_parameter_descriptions(runner: FunctionRunner, func: Callable[..., str]) -> None:
    runner.function(name="forecast")(func)

    (tool,) = runner.tools
    assert tool["description"] == "Forecast the weather."
    assert tool["parameters"]["properties"] == {
        "city": {"type": "string", "description": "The city to forecast, spelled in English."},
        "days": {"type": "integer", "default": 3, "description": "How many days ahead."},
    }


def test_annotated_description_wins_over_the_docstring(runner: FunctionRunner) -> None:
    @runner.function
    def greet(name: Annotated[str, pydantic.Field(description="From Annotated.")]) -> str:
        """Greet someone.

        Args:
            name: From the docstring.
        """
        return name

    assert parameters_of(runner, "greet")["properties"]["name"] == {
        "type": "string",
        "description": "From Annotated.",
    }


def test_parameters_as_a_json_schema_dict_is_declared_as_given(runner: FunctionRunner) -> None:
    schema = {
        "type": "object",
        "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        "required": ["sku"],
        "additionalProperties": False,
    }

    @runner.function(parameters=schema, description="Count stock.")
    def stock(**arguments: Any) -> int:
        return 0

    assert parameters_of(runner, "stock") == schema


def test_parameters_as_a_pydantic_model_drops_generated_titles(runner: FunctionRunner) -> None:
    @runner.function(parameters=Address)
    def verify(address: Address) -> bool:
        """Check that an address exists."""
        return True

    assert parameters_of(runner, "verify") == {
        "type": "object",
        "properties": {
            "street": {"type": "string"},
            "postal_code": {"type": "string", "description": "Digits only."},
        },
        "required": ["street", "postal_code"],
        "additionalProperties": False,
    }


def test_a_property_named_title_is_kept(runner: FunctionRunner) -> None:
    @runner.function
    def publish(title: str) -> None:
        """Publish a post."""

    assert parameters_of(runner, "publish")["properties"] == {"title": {"type": "string"}}


def test_duplicate_names_are_refused_and_name_overrides(runner: FunctionRunner) -> None:
    def lookup(word: str) -> str:
        """Look a word up."""
        return word

    runner.function(lookup)
    with pytest.raises(AdmissionError, match="already registered") as raised:
        runner.function(lookup)
    assert raised.value.field == "name"
    assert raised.value.tool == "lookup"

    runner.function(name="lookup_again")(lookup)
    assert [tool["name"] for tool in runner.tools] == ["lookup", "lookup_again"]


def test_deferred_functions_add_exactly_one_tool_search(runner: FunctionRunner) -> None:
    @runner.function
    def eager() -> None:
        """Always loaded."""

    assert [tool["type"] for tool in runner.tools] == ["function"]

    @runner.function(defer_loading=True)
    def rare() -> None:
        """Loaded on demand."""

    @runner.function(defer_loading=True)
    def rarer() -> None:
        """Loaded on demand too."""

    tools = runner.tools
    assert [tool["type"] for tool in tools] == ["function"] * 3 + ["tool_search"]
    assert [tool.get("defer_loading") for tool in tools[:3]] == [None, True, True]


def _valid(a: int) -> int:
    """Return a."""
    return a


def _no_docstring(a: int) -> int:
    return a


def _variadic(*items: str) -> str:
    """Join items."""
    return ""


def _keywords(**options: str) -> str:
    """Take options."""
    return ""


def _positional(a: int, /) -> int:
    """Take a positional-only argument."""
    return a


@pytest.mark.parametrize(
    ("func", "options", "field", "words"),
    [
        (_no_docstring, {}, "description", "add a docstring"),
        (_variadic, {}, "parameters", "*items"),
        (_keywords, {}, "parameters", "*options"),
        (_positional, {}, "parameters", "Remove the `/`"),
        (_valid, {"name": " "}, "tools[0].name", "blank"),
        (_valid, {"name": "n" * 513}, "tools[0].name", "513 bytes"),
        (
            _valid,
            {"parameters": {"type": "array"}},
            "tools[0].parameters.type",
            'type "object"',
        ),
    ],
    ids=[
        "no-description",
        "var-positional",
        "var-keyword",
        "positional-only",
        "blank-name",
        "long-name",
        "array-root",
    ],
)
def test_registration_refuses_what_the_server_would(
    runner: FunctionRunner,
    func: Callable[..., Any],
    options: dict[str, Any],
    field: str,
    words: str,
) -> None:
    with pytest.raises(AdmissionError) as raised:
        runner.function(**options)(func)
    assert raised.value.field == field
    assert words in str(raised.value)
    assert runner.tools == []


def test_registration_refuses_the_65th_function(runner: FunctionRunner) -> None:
    def make(index: int) -> Callable[[], None]:
        def func() -> None:
            """One of many."""

        func.__name__ = f"f{index}"
        return func

    for index in range(64):
        runner.function(make(index))
    with pytest.raises(AdmissionError, match="64"):
        runner.function(make(64))
    assert len(runner.tools) == 64
