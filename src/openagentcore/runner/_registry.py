"""Registered functions: their declarations (JSON Schema) and how arguments bind to them.

A function's schema comes from its signature through pydantic, so what the model is
told and what is validated before the call are the same thing. Per-parameter
descriptions come from ``Annotated[..., Field(description=...)]``, a plain string in
``Annotated``, or the docstring.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, get_args, get_origin, get_type_hints

import pydantic
from pydantic.fields import FieldInfo

from .._admission import check_tools
from .._errors import AdmissionError
from ._docstrings import parse_docstring

__all__ = ["ArgumentsError", "FunctionRegistry", "RegisteredFunction"]


class ArgumentsError(Exception):
    """The model's arguments do not fit the function. The text names fields, never values."""


@dataclass(frozen=True, slots=True)
class RegisteredFunction:
    name: str
    description: str
    parameters: dict[str, Any]
    func: Callable[..., Any] = field(repr=False)
    idempotent: bool = False
    defer_loading: bool = False
    #: Runs of one call at most (the first and re-runs of an idempotent call in doubt).
    max_attempts: int = 3
    #: Calls of this function running at once, or ``None`` for the runner's limit.
    max_concurrency: int | None = None
    _binder: Callable[[Mapping[str, Any]], tuple[tuple[Any, ...], dict[str, Any]]] = field(
        default=lambda _: ((), {}), repr=False
    )

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.func)

    def declaration(self) -> dict[str, Any]:
        """The ``function`` tool declaration for an Agent or Session ``tools`` list."""
        tool: dict[str, Any] = {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }
        if self.defer_loading:
            tool["defer_loading"] = True
        return tool

    def bind(self, arguments: object) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Validate the model's arguments (a JSON string or object) into call arguments."""
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                raise ArgumentsError("Arguments are not valid JSON.") from None
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            raise ArgumentsError("Arguments must be a JSON object.")
        return self._binder(arguments)


def _describe_validation_error(error: pydantic.ValidationError) -> str:
    problems = []
    for item in error.errors(include_input=False, include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "<arguments>"
        problems.append(f"`{where}`: {item['msg']}")
    return "Invalid arguments: " + "; ".join(problems[:5])


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's auto-generated titles, which only add noise for the model."""

    def walk(node: Any, *, in_properties: bool = False) -> Any:
        if isinstance(node, dict):
            return {
                key: walk(value, in_properties=(key == "properties"))
                for key, value in node.items()
                if not (key == "title" and not in_properties and isinstance(value, str))
            }
        if isinstance(node, list):
            return [walk(item) for item in node]
        return node

    cleaned: dict[str, Any] = walk(schema)
    cleaned.setdefault("type", "object")
    cleaned.setdefault("properties", {})
    return cleaned


def _signature_binder(
    func: Callable[..., Any], param_docs: Mapping[str, str]
) -> tuple[dict[str, Any], Callable[[Mapping[str, Any]], tuple[tuple[Any, ...], dict[str, Any]]]]:
    signature = inspect.signature(func)
    hints = get_type_hints(func, include_extras=True)
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise AdmissionError(
                f"Function {func.__name__!r} takes *{param.name}; a JSON Schema cannot "
                "describe variadic parameters. Name each parameter, or pass parameters=.",
                tool=func.__name__,
                field="parameters",
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise AdmissionError(
                f"Function {func.__name__!r} has positional-only parameter {param.name!r}; "
                "arguments arrive by name. Remove the `/`.",
                tool=func.__name__,
                field="parameters",
            )
        annotation = hints.get(param.name, Any)
        info = _field_info(annotation, param, param_docs.get(param.name))
        fields[param.name] = (annotation, info)
    model = pydantic.create_model(
        f"{func.__name__}_arguments",
        __config__=pydantic.ConfigDict(extra="ignore", arbitrary_types_allowed=False),
        **fields,
    )
    assert issubclass(model, pydantic.BaseModel)

    def bind(arguments: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        try:
            validated = model.model_validate(dict(arguments))
        except pydantic.ValidationError as exc:
            raise ArgumentsError(_describe_validation_error(exc)) from None
        return (), {name: getattr(validated, name) for name in fields}

    return _clean_schema(model.model_json_schema()), bind


def _field_info(annotation: Any, param: inspect.Parameter, doc: str | None) -> FieldInfo:
    description = doc
    if get_origin(annotation) is Annotated:
        for extra in get_args(annotation)[1:]:
            if isinstance(extra, str):
                description = extra
            elif isinstance(extra, FieldInfo) and extra.description:
                description = None  # the Annotated Field already carries it
    default = param.default if param.default is not param.empty else ...
    # An explicit description=None would replace the one an Annotated Field carries.
    info: FieldInfo = (
        pydantic.Field(default=default)
        if description is None
        else pydantic.Field(default=default, description=description)
    )
    return info


def _model_binder(
    model: type[pydantic.BaseModel],
) -> Callable[[Mapping[str, Any]], tuple[tuple[Any, ...], dict[str, Any]]]:
    def bind(arguments: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        try:
            return (model.model_validate(dict(arguments)),), {}
        except pydantic.ValidationError as exc:
            raise ArgumentsError(_describe_validation_error(exc)) from None

    return bind


def _schema_binder(
    schema: Mapping[str, Any],
) -> Callable[[Mapping[str, Any]], tuple[tuple[Any, ...], dict[str, Any]]]:
    required = [name for name in schema.get("required", []) if isinstance(name, str)]

    def bind(arguments: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        missing = [name for name in required if name not in arguments]
        if missing:
            fields = ", ".join(f"`{name}`" for name in missing)
            raise ArgumentsError(f"Invalid arguments: missing required {fields}")
        return (), dict(arguments)

    return bind


def describe_function(
    func: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: Mapping[str, Any] | type[pydantic.BaseModel] | None = None,
    idempotent: bool = False,
    defer_loading: bool = False,
) -> RegisteredFunction:
    """Build the declaration and argument binder for ``func``.

    ``parameters`` overrides the signature: a pydantic model (the function then receives
    one validated instance) or a JSON Schema dict (checked for required keys only; the
    function receives the arguments as keyword arguments).
    """
    if not callable(func):
        raise TypeError(f"Expected a callable, got {type(func).__name__}")
    doc = parse_docstring(inspect.getdoc(func))
    fn_name = name if name is not None else getattr(func, "__name__", "")
    if isinstance(parameters, type) and issubclass(parameters, pydantic.BaseModel):
        schema = _clean_schema(parameters.model_json_schema())
        binder = _model_binder(parameters)
    elif parameters is not None:
        schema = dict(parameters)
        binder = _schema_binder(schema)
    else:
        schema, binder = _signature_binder(func, doc.params)
    text = description if description is not None else doc.description
    if not text:
        raise AdmissionError(
            f"Function {fn_name!r} has no description; add a docstring or pass description=. "
            "The model decides when to call a function from this text.",
            tool=fn_name or None,
            field="description",
        )
    registered = RegisteredFunction(
        name=fn_name,
        description=text,
        parameters=schema,
        func=func,
        idempotent=idempotent,
        defer_loading=defer_loading,
        _binder=binder,
    )
    check_tools([registered.declaration()], for_session=False)
    return registered


class FunctionRegistry:
    """The functions one runner serves, by name."""

    def __init__(self) -> None:
        self._functions: dict[str, RegisteredFunction] = {}

    def add(self, function: RegisteredFunction) -> None:
        if function.name in self._functions:
            raise AdmissionError(
                f"A function named {function.name!r} is already registered; "
                "pass name= to register this one under another name.",
                tool=function.name,
                field="name",
            )
        candidate = [*self._functions.values(), function]
        check_tools(_declarations(candidate), for_session=True)
        self._functions[function.name] = function

    def get(self, name: str) -> RegisteredFunction | None:
        return self._functions.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._functions

    def __len__(self) -> int:
        return len(self._functions)

    def tools(self) -> list[dict[str, Any]]:
        return _declarations(list(self._functions.values()))


def _declarations(functions: list[RegisteredFunction]) -> list[dict[str, Any]]:
    tools = [function.declaration() for function in functions]
    if any(function.defer_loading for function in functions):
        # The contract requires tool_search exactly when some function is deferred.
        tools.append({"type": "tool_search"})
    return tools
