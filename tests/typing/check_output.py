"""Checked by mypy --strict from tests/runner/test_output.py, never run: the types a
caller sees for structured output."""

from __future__ import annotations

from typing import Any

import pydantic
from typing_extensions import assert_type

from openagentcore import AsyncFunctionRunner, FunctionRunner, ServeReport, TurnResult
from openagentcore.runner._output import parse_turn_output


class Answer(pydantic.BaseModel):
    city: str
    temperature: float


def typed(result: TurnResult) -> float:
    parsed = parse_turn_output(result, Answer)
    assert_type(parsed, TurnResult[Answer])
    assert_type(parsed.output, Answer)
    return parsed.output.temperature


def untyped_is_any(result: TurnResult) -> None:
    assert_type(result, TurnResult[Any])
    assert_type(result.output, Any)


def constructed_as_before() -> TurnResult:
    result = TurnResult(
        session_id="s",
        turn_id="t",
        status="completed",
        text="hi",
        output="hi",
        report=ServeReport("s"),
    )
    assert_type(result.output, str)
    return result


def run_turn_types(runner: FunctionRunner) -> None:
    assert_type(runner.run_turn("s", "hi"), TurnResult[str | None])
    assert_type(runner.run_turn("s", "hi", output_type=Answer), TurnResult[Answer])
    assert_type(runner.run_turn("s", "hi", output_type=Answer).output, Answer)


async def async_run_turn_types(runner: AsyncFunctionRunner) -> None:
    assert_type(await runner.run_turn("s", "hi"), TurnResult[str | None])
    assert_type(await runner.run_turn("s", "hi", output_type=Answer), TurnResult[Answer])
