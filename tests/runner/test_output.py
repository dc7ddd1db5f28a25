"""Typed structured output: structured_output(), check_output_format(),
parse_turn_output() and TurnResult[OutputT] (checked by mypy --strict)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic
import pytest
from mypy import api as mypy_api
from typing_extensions import TypedDict

import openagentcore
from openagentcore import ServeReport, StructuredOutputError, TurnResult, structured_output
from openagentcore._admission import check_text
from openagentcore._errors import AdmissionError
from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript
from openagentcore.runner._output import check_output_format, parse_turn_output
from openagentcore.types import TextConfig, TextFormat

from ._support import Harness, RunnerKind

ROOT = Path(__file__).resolve().parents[2]
#: The driver does not matter for parsing; both runners run the end-to-end test.
RUNNER_COMBINATIONS: list[tuple[RunnerKind, str]] = [("sync", "def"), ("async", "def")]


class Answer(pydantic.BaseModel):
    city: str
    temperature: float


class Point(TypedDict):
    x: int
    y: int


def result_with(text: str | None, status: str = "completed") -> TurnResult:
    return TurnResult(
        session_id="sess_1",
        turn_id="turn_1",
        status=status,
        text=text,
        output=text,
        report=ServeReport("sess_1"),
    )


def test_structured_output_is_the_agents_api_text_format() -> None:
    """structured-output.md: the format is only {type, schema} (no Responses API name or
    strict) and the schema's root is an object."""
    text = structured_output(Answer)
    assert text == {
        "format": {"type": "json_schema", "schema": Answer.model_json_schema()},
    }
    assert structured_output(Point)["format"]["schema"]["type"] == "object"
    # The one Harness that runs structured output wants the object root spelled out.
    check_text(text, harness="claude_sdk", for_session=True)


def test_structured_output_refuses_what_the_server_would() -> None:
    with pytest.raises(AdmissionError, match='root must have type "object"'):
        structured_output(list[int])

    class Opaque:
        pass

    with pytest.raises(TypeError, match="needs a type pydantic can describe"):
        structured_output(Opaque)


@pytest.mark.parametrize(
    "text",
    [
        structured_output(Answer),
        TextConfig(format=TextFormat.json_schema(Answer.model_json_schema())),
    ],
    ids=["dict", "model"],
)
def test_check_output_format_accepts_a_json_schema_format(text: Any) -> None:
    check_output_format(text, Answer)


@pytest.mark.parametrize(
    "text",
    [None, {}, {"format": {"type": "text"}}, TextConfig()],
    ids=["none", "empty", "text-dict", "text-model"],
)
def test_check_output_format_explains_a_missing_json_schema_format(text: Any) -> None:
    with pytest.raises(ValueError, match=r"structured_output\(Answer\)") as raised:
        check_output_format(text, Answer)
    assert "output_type=Answer needs an agent that answers in JSON" in str(raised.value)


def test_parse_turn_output_types_the_answer() -> None:
    result = result_with('{"city": "Oslo", "temperature": -3.5}')
    parsed = parse_turn_output(result, Answer)
    assert parsed.output == Answer(city="Oslo", temperature=-3.5)
    fields = [f.name for f in dataclasses.fields(TurnResult) if f.name != "output"]
    assert [getattr(parsed, f) for f in fields] == [getattr(result, f) for f in fields]
    assert parse_turn_output(result_with('{"x": 1, "y": 2}'), Point).output == {"x": 1, "y": 2}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("It is cold in Oslo.", "`<answer>`: Invalid JSON"),
        ('{"city": "Oslo"}', "`temperature`: Field required"),
        ('{"city": "Oslo", "temperature": "secret-value"}', "`temperature`: Input should be"),
    ],
)
def test_an_answer_that_does_not_parse_keeps_the_turn_result(text: str, words: str) -> None:
    result = result_with(text)
    with pytest.raises(StructuredOutputError) as raised:
        parse_turn_output(result, Answer)
    assert raised.value.result is result
    assert raised.value.output_type is Answer
    assert words in str(raised.value)
    assert "secret-value" not in str(raised.value)


def test_a_turn_without_an_answer_is_a_structured_output_error() -> None:
    result = result_with(None, status="failed")
    with pytest.raises(StructuredOutputError, match="ended 'failed' without an answer") as raised:
        parse_turn_output(result, Answer)
    assert raised.value.result is result


def test_structured_output_names_are_public() -> None:
    assert openagentcore.structured_output is structured_output
    assert openagentcore.StructuredOutputError is StructuredOutputError
    assert issubclass(StructuredOutputError, openagentcore.OpenAgentCoreError)


def _mypy(*args: str) -> tuple[str, int]:
    stdout, stderr, status = mypy_api.run(
        ["--strict", "--config-file", str(ROOT / "pyproject.toml"), *args]
    )
    return stdout + stderr, status


def test_turn_result_output_type_checks_as_the_output_type() -> None:
    output, status = _mypy(str(ROOT / "tests" / "typing" / "check_output.py"))
    assert status == 0, output


def test_a_wrong_use_of_the_typed_output_is_a_mypy_error(tmp_path: Path) -> None:
    """The check above can fail: the parsed output is an Answer, not anything."""
    code = (
        "from openagentcore import TurnResult\n"
        "from openagentcore.runner._output import parse_turn_output\n"
        "import pydantic\n"
        "class Answer(pydantic.BaseModel):\n"
        "    city: str\n"
        "def use(result: TurnResult) -> int:\n"
        "    return parse_turn_output(result, Answer).output\n"
    )
    wrong = tmp_path / "wrong_use.py"
    wrong.write_text(code, encoding="utf-8")
    output, status = _mypy(str(wrong))
    assert status == 1, output
    assert 'Incompatible return value type (got "Answer", expected "int")' in output


# End to end, on the emulator.


def test_a_session_with_structured_output_answers_in_the_schema(
    make_core: Callable[..., LocalCore], runner_kind: RunnerKind
) -> None:
    """The scripted model answers a json_schema Session with JSON for the schema, after
    the Turn's function calls are served."""
    # The Session's first Turn answers at once; run_turn's Turn calls a function first.
    core = make_core(
        scenario=Scenario(
            turns=[TurnScript(), TurnScript(steps=[[FunctionCall("lookup", {"city": "Oslo"})]])]
        )
    )
    harness = Harness(core, runner_kind)
    try:

        @harness.runner.function
        def lookup(city: str) -> str:
            """Look up the weather in a city."""
            return f"{city}: -3.5"

        session = harness.client.sessions.create(
            agent={
                "model": "scripted",
                "tools": harness.runner.tools,
                "text": structured_output(Answer),
            },
            input="Hello.",
        )
        harness.serve(session.id)
        check_output_format(session.agent.text, Answer)
        result = harness.run_turn(session.id, "How cold is Oslo?")
        assert result.status == "completed"
        assert result.report.calls_run == 1
        parsed = parse_turn_output(result, Answer)
        assert isinstance(parsed.output, Answer)
        assert parsed.output == Answer.model_validate_json(result.text or "")
    finally:
        harness.close()


def test_a_reply_outside_the_schema_raises_on_the_emulator(
    make_core: Callable[..., LocalCore], runner_kind: RunnerKind
) -> None:
    core = make_core(scenario=Scenario(turns=[TurnScript(), TurnScript(answer='{"city": "Oslo"}')]))
    harness = Harness(core, runner_kind)
    try:
        session = harness.client.sessions.create(
            agent={"model": "scripted", "text": structured_output(Answer)}, input="Hello."
        )
        harness.serve(session.id)
        result = harness.run_turn(session.id, "How cold is Oslo?")
        with pytest.raises(StructuredOutputError, match="`temperature`: Field required") as raised:
            parse_turn_output(result, Answer)
        assert raised.value.result.text == '{"city": "Oslo"}'
        assert raised.value.result.status == "completed"
    finally:
        harness.close()
