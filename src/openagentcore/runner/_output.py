"""Typed structured output: declare a Turn's answer as a type, and read it back as one.

:func:`structured_output` turns a type into the ``text`` configuration of an Agent or
Session, :func:`check_output_format` tells early whether a Session answers in JSON at
all, and :func:`parse_turn_output` reads a Turn's answer into the type, raising
:class:`StructuredOutputError` (which keeps the :class:`TurnResult`) when it does not
fit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

import pydantic

from .._admission import check_text
from .._errors import OpenAgentCoreError
from ..types import TextConfig
from ._report import TurnResult

__all__ = [
    "StructuredOutputError",
    "check_output_format",
    "parse_turn_output",
    "structured_output",
]

T = TypeVar("T")


class StructuredOutputError(OpenAgentCoreError):
    """A Turn's answer is missing or does not parse as the requested type.

    ``result`` is the whole :class:`TurnResult` (its ``text`` holds the raw answer, its
    ``output`` is ``None``), so nothing the Turn did is lost.
    """

    def __init__(self, message: str, *, result: TurnResult[Any], output_type: object) -> None:
        super().__init__(message)
        self.result = result
        self.output_type = output_type


def structured_output(output_type: type[Any]) -> dict[str, Any]:
    """The ``text`` configuration that makes the agent answer with JSON for
    ``output_type`` (a pydantic model, dataclass or TypedDict): pass it as
    ``agent={..., "text": structured_output(Answer)}`` when creating a Session or
    Agent.

    The Agents API form is ``{"format": {"type": "json_schema", "schema": ...}}``; it
    has no ``name`` or ``strict`` (those belong to the Responses API), and the schema's
    root must be an object. Raises :class:`~openagentcore.AdmissionError` for a type
    whose schema the server would refuse.
    """
    try:
        schema = pydantic.TypeAdapter(output_type).json_schema()
    except pydantic.PydanticUserError as exc:
        raise TypeError(
            f"structured_output() needs a type pydantic can describe as JSON Schema; "
            f"{output_type!r} is not one ({exc.message}). Use a pydantic model, "
            "dataclass or TypedDict."
        ) from None
    text: dict[str, Any] = {"format": {"type": "json_schema", "schema": schema}}
    check_text(text, for_session=True)
    return text


def check_output_format(
    text: TextConfig | Mapping[str, Any] | None, output_type: type[Any]
) -> None:
    """Raise ``ValueError`` unless ``text`` (an Agent's or Session's ``agent.text``)
    asks for JSON-schema output, so ``run_turn(..., output_type=...)`` can fail before
    it sends anything instead of after the Turn answers in prose. Raises ``TypeError``
    for a type pydantic cannot validate, for the same reason."""
    name = getattr(output_type, "__name__", repr(output_type))
    try:
        pydantic.TypeAdapter(output_type)
    except pydantic.PydanticUserError as exc:
        raise TypeError(
            f"output_type={name} is not a type pydantic can validate ({exc.message}). "
            "Use a pydantic model, dataclass or TypedDict."
        ) from None
    if isinstance(text, TextConfig):
        format_type = text.format.type
    elif isinstance(text, Mapping) and isinstance(text.get("format"), Mapping):
        format_type = text["format"].get("type")
    else:
        format_type = None
    if format_type != "json_schema":
        raise ValueError(
            f"output_type={name} needs an agent that answers in JSON, but its text.format "
            f"is {format_type or 'text'!r}. Create the Session or Agent with "
            f'"text": structured_output({name}), or drop output_type.'
        )


def parse_turn_output(result: TurnResult[Any], output_type: type[T]) -> TurnResult[T]:
    """``result`` with ``output`` parsed from its ``text`` as ``output_type``.

    Raises :class:`StructuredOutputError` when the Turn gave no answer or the answer is
    not JSON of that type; the error's message names the fields that do not fit, never
    their values.
    """
    name = getattr(output_type, "__name__", repr(output_type))
    if result.text is None:
        raise StructuredOutputError(
            f"Turn {result.turn_id} ended {result.status!r} without an answer to parse "
            f"as {name}; see the error's result.report.",
            result=result,
            output_type=output_type,
        )
    try:
        output = pydantic.TypeAdapter(output_type).validate_json(result.text)
    except pydantic.ValidationError as exc:
        problems = [
            f"`{'.'.join(str(part) for part in item['loc']) or '<answer>'}`: {item['msg']}"
            for item in exc.errors(include_input=False, include_url=False)[:5]
        ]
        raise StructuredOutputError(
            f"Turn {result.turn_id}'s answer does not parse as {name}: "
            f"{'; '.join(problems)}. The raw answer is in the error's result.text.",
            result=result,
            output_type=output_type,
        ) from None
    except Exception as exc:  # a validator of the type raised something else
        raise StructuredOutputError(
            f"Turn {result.turn_id}'s answer could not be parsed as {name}: a validator "
            f"raised {type(exc).__name__}. The raw answer is in the error's result.text.",
            result=result,
            output_type=output_type,
        ) from exc
    parsed: TurnResult[T] = dataclasses.replace(result, output=output)
    return parsed
