"""Registration v2: docstrings parsed by a library, strict arguments, untrusted JSON,
per-function options and the CallContext parameter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import pydantic
import pytest

from openagentcore.runner._registry import describe_function


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

