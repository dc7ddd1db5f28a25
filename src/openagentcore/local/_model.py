"""The scripted model: scenarios that say which functions each Turn calls and what it answers.

A :class:`Scenario` lists one :class:`TurnScript` per Turn of a Session. A script is a
sequence of steps, each calling one or more functions at once, followed by an answer.
Turns past the end of the script, and every Turn when there is no scenario, use the
default: call each declared function once, all in one step, then summarise the outputs.
The model is a pure function of the Session configuration, the Turn's position and the
results it was given, so runs are reproducible.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from ._schema_examples import example_for_schema

__all__ = [
    "Answer",
    "CallFunctions",
    "Fail",
    "FunctionCall",
    "FunctionOutcome",
    "ModelAction",
    "Scenario",
    "ScriptedModel",
    "TurnContext",
    "TurnScript",
]


@dataclass(frozen=True)
class FunctionCall:
    """One call the model makes. ``arguments=None`` generates them from the schema."""

    name: str
    arguments: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class FunctionOutcome:
    """A result the model was given, as submitted by the application."""

    name: str
    call_id: str
    success: bool
    output: Any
    error: str | None

    @property
    def text(self) -> str:
        """The result flattened to text: output text parts, then the error."""
        parts: list[str] = []
        if isinstance(self.output, str):
            parts.append(self.output)
        elif isinstance(self.output, list):
            parts.extend(
                str(part.get("text", ""))
                for part in self.output
                if isinstance(part, dict) and part.get("type") == "input_text"
            )
        if self.error:
            parts.append(self.error)
        return " ".join(parts)


AnswerTemplate = Union[str, Callable[[Sequence[FunctionOutcome]], str]]  # noqa: UP007 (runtime alias, 3.10)


@dataclass(frozen=True)
class TurnScript:
    """What one Turn does.

    ``steps`` are rounds of function calls; the calls of one round are issued together
    and the next round starts when all their results are applied. ``answer`` is the
    final text: a callable receiving every outcome of the Turn, or a string in which
    ``{summary}`` and ``{<function name>}`` are replaced by the summary of all outputs
    and by that function's latest output text. ``None`` answers with the summary (or,
    with a ``json_schema`` text format, with JSON matching the schema). ``fail`` ends the
    Turn as failed after its steps instead of answering, to test failure handling.
    """

    steps: Sequence[Sequence[FunctionCall]] = ()
    answer: AnswerTemplate | None = None
    fail: bool = False


@dataclass(frozen=True)
class Scenario:
    """Scripts for a Session's Turns, in order."""

    turns: Sequence[TurnScript] = field(default_factory=tuple)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Scenario:
        """Build a scenario from parsed JSON or YAML.

        Shape: ``{"turns": [{"steps": [[{"name": ..., "arguments": {...}}]],
        "answer": "...", "fail": false}]}``; a step may also be a single call object.
        """
        turns_data = data.get("turns", [])
        if not isinstance(turns_data, list):
            raise ValueError("scenario 'turns' must be a list of turn scripts")
        turns: list[TurnScript] = []
        for turn_index, turn in enumerate(turns_data):
            if not isinstance(turn, dict):
                raise ValueError(f"scenario turns[{turn_index}] must be an object")
            steps_data = turn.get("steps", [])
            if not isinstance(steps_data, list):
                raise ValueError(f"scenario turns[{turn_index}].steps must be a list")
            steps = [
                _parse_step(step, f"turns[{turn_index}].steps[{step_index}]")
                for step_index, step in enumerate(steps_data)
            ]
            answer = turn.get("answer")
            if answer is not None and not isinstance(answer, str):
                raise ValueError(f"scenario turns[{turn_index}].answer must be a string")
            fail = turn.get("fail", False)
            if not isinstance(fail, bool):
                raise ValueError(f"scenario turns[{turn_index}].fail must be true or false")
            turns.append(TurnScript(steps=tuple(steps), answer=answer, fail=fail))
        return cls(turns=tuple(turns))

    @classmethod
    def from_file(cls, path: str | Path) -> Scenario:
        """Load a scenario from a ``.json``, ``.yaml`` or ``.yml`` file."""
        file = Path(path)
        text = file.read_text(encoding="utf-8")
        if file.suffix.lower() in (".yaml", ".yml"):
            import yaml

            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as error:
                raise ValueError(
                    f"scenario file {file} is not valid YAML: {_yaml_problem(error)}"
                ) from None
        else:
            try:
                data = json.loads(text)
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"scenario file {file} is not valid JSON: {error.msg} at line "
                    f"{error.lineno}, column {error.colno}"
                ) from None
        if not isinstance(data, dict):
            raise ValueError(f"scenario file {file} must contain an object with 'turns'")
        try:
            return cls.from_dict(data)
        except ValueError as error:
            raise ValueError(f"scenario file {file}: {error}") from None


def _yaml_problem(error: Exception) -> str:
    """PyYAML's error on one line: its problem and where, without the quoted excerpt."""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    mark = getattr(error, "problem_mark", None)
    if mark is None:
        return str(problem)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"


def _parse_step(step: object, where: str) -> tuple[FunctionCall, ...]:
    calls = step if isinstance(step, list) else [step]
    parsed: list[FunctionCall] = []
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ValueError(f"scenario {where} must be a call object with a string 'name'")
        arguments = call.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise ValueError(f"scenario {where}.arguments must be an object")
        parsed.append(FunctionCall(name=call["name"], arguments=arguments))
    return tuple(parsed)


@dataclass(frozen=True)
class TurnContext:
    """What the model sees when it decides the next action of a Turn."""

    turn_index: int
    step: int
    tools: Sequence[Mapping[str, Any]]
    text_format: Mapping[str, Any]
    outcomes: Sequence[FunctionOutcome]


@dataclass(frozen=True)
class CallFunctions:
    calls: Sequence[tuple[str, Mapping[str, Any]]]


@dataclass(frozen=True)
class Answer:
    text: str
    #: A complete structured answer is sent as one delta, per the event rules.
    structured: bool


@dataclass(frozen=True)
class Fail:
    """End the Turn as failed."""


ModelAction = Union[CallFunctions, Answer, Fail]  # noqa: UP007 (runtime alias, 3.10)


class ScriptedModel:
    """Decides each step of a Turn from a :class:`Scenario`."""

    def __init__(self, scenario: Scenario | None = None) -> None:
        self.scenario = scenario or Scenario()

    def next_action(self, context: TurnContext) -> ModelAction:
        script = self._script_for(context)
        if context.step < len(script.steps):
            calls = [
                (call.name, dict(call.arguments) if call.arguments is not None else None)
                for call in script.steps[context.step]
            ]
            return CallFunctions(
                [
                    (name, args if args is not None else self._arguments_for(name, context))
                    for name, args in calls
                ]
            )
        if script.fail:
            return Fail()
        return self._answer(script, context)

    def _script_for(self, context: TurnContext) -> TurnScript:
        if context.turn_index < len(self.scenario.turns):
            return self.scenario.turns[context.turn_index]
        declared = [FunctionCall(str(tool["name"])) for tool in _functions(context.tools)]
        return TurnScript(steps=(tuple(declared),) if declared else ())

    def _arguments_for(self, name: str, context: TurnContext) -> Mapping[str, Any]:
        for tool in _functions(context.tools):
            if tool.get("name") == name:
                generated = example_for_schema(tool.get("parameters", {}))
                return generated if isinstance(generated, dict) else {}
        return {}

    def _answer(self, script: TurnScript, context: TurnContext) -> Answer:
        structured = context.text_format.get("type") == "json_schema"
        if callable(script.answer):
            return Answer(script.answer(context.outcomes), structured=structured)
        if isinstance(script.answer, str):
            # Structured answers are JSON full of braces: send them verbatim.
            if structured:
                return Answer(script.answer, structured=True)
            values: dict[str, str] = {outcome.name: outcome.text for outcome in context.outcomes}
            values["summary"] = _summary(context.outcomes)
            return Answer(script.answer.format_map(_KeepUnknown(values)), structured=False)
        if structured:
            schema = context.text_format.get("schema", {})
            return Answer(json.dumps(example_for_schema(schema)), structured=True)
        return Answer(_summary(context.outcomes), structured=False)


class _KeepUnknown(dict[str, str]):
    """Leaves ``{placeholders}`` with no value as they are instead of raising."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _functions(tools: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [
        tool
        for tool in tools
        if tool.get("type") == "function" and isinstance(tool.get("name"), str)
    ]


def _summary(outcomes: Sequence[FunctionOutcome]) -> str:
    if not outcomes:
        return "Done."
    lines = [
        f"{outcome.name}: {outcome.text}"
        if outcome.success
        else f"{outcome.name} failed: {outcome.text}"
        for outcome in outcomes
    ]
    return "Results: " + "; ".join(lines) + "."
