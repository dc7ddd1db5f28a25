"""Registered functions: their declarations (JSON Schema) and how arguments bind to them.

A function's schema comes from its signature through pydantic, so what the model is
told and what is validated before the call are the same thing. Per-parameter
descriptions come from ``Annotated[..., Field(description=...)]``, a plain string in
``Annotated``, or the docstring, in that order.

Arguments are strict by default: the schema says ``additionalProperties: false`` and an
argument the function does not name fails the call instead of being dropped.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeGuard, Union, get_args, get_origin, get_type_hints

import pydantic
import pydantic_core
from pydantic.fields import FieldInfo
from pydantic_core.core_schema import ErrorType

from .._admission import check_tools
from .._errors import AdmissionError
from ._context import CallContext
from ._docstrings import ParsedDocstring, parse_docstring
from ._json import (
    UntrustedJSONError,
    check_json_value,
    parse_untrusted_json,
)

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "ArgumentsError",
    "FunctionRegistry",
    "RegisteredFunction",
    "describe_function",
]

#: Runs of one call at most, counting re-runs of an idempotent call after interruptions.
DEFAULT_MAX_ATTEMPTS = 3

Binder = Callable[[Mapping[str, Any]], tuple[tuple[Any, ...], dict[str, Any]]]


class ArgumentsError(Exception):
    """The model's arguments do not fit the function. The text names fields, never values."""


@dataclass(frozen=True, slots=True)
class RegisteredFunction:
    """A function as registered: its declaration, how arguments bind to it, and the
    limits the runner enforces when it runs.

    ``context_parameter`` names the parameter that receives the :class:`CallContext`
    (``None`` when the function takes none); it is not part of ``parameters``.
    ``timeout`` (seconds), ``max_concurrency`` (calls of this function at once) and
    ``max_attempts`` (runs of one call, counting idempotent re-runs) are enforced by
    the runner. ``strict=False`` drops arguments the function does not name instead of
    failing the call.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    func: Callable[..., Any] = field(repr=False)
    idempotent: bool = False
    defer_loading: bool = False
    strict: bool = True
    context_parameter: str | None = None
    timeout: float | None = None
    max_concurrency: int | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    _binder: Binder = field(default=lambda _: ((), {}), repr=False)

    @property
    def is_async(self) -> bool:
        """Whether the function is a coroutine function (also under partials, or as an
        object's ``async def __call__``), which the runner awaits. A plain function
        that returns an awaitable has it awaited too, after it returns."""
        return inspect.iscoroutinefunction(_declaring(self.func))

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

    def bind(
        self, arguments: object, *, context: CallContext | None = None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Validate the model's arguments (a JSON string or object) into call arguments,
        adding ``context`` for a function that declares a :class:`CallContext`.

        Raises :class:`ArgumentsError` (text for the model, naming fields, never values)
        for anything the function cannot be called with: JSON over
        ``_json.MAX_ARGUMENTS_BYTES`` or nested too deep, NaN or Infinity, lone
        surrogates, unknown fields (unless ``strict=False``) and invalid values.
        """
        if self.context_parameter is not None and context is None:
            raise TypeError(
                f"Function {self.name!r} takes a CallContext in {self.context_parameter!r}; "
                "pass context= to bind()."
            )
        try:
            if isinstance(arguments, str):
                arguments = parse_untrusted_json(arguments) if arguments.strip() else {}
            else:
                check_json_value(arguments)
        except UntrustedJSONError as exc:
            raise ArgumentsError(f"Invalid arguments: {exc}.") from None
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            raise ArgumentsError("Arguments must be a JSON object.")
        args, kwargs = self._binder(arguments)
        if self.context_parameter is not None:
            kwargs[self.context_parameter] = context
        return args, kwargs


#: Error context that may quote the value: a validator's or parser's own text, the tag
#: given to a discriminated union, an attribute name.
_QUOTING_CONTEXT = frozenset({"error", "tag", "attribute"})
#: Placeholders for that context in pydantic's message templates, with the separator or
#: quotes around them.
_QUOTING_PLACEHOLDER = re.compile(r"(?:,\s*|:\s*|\s)?'?\{(?:error|tag|attribute)\}'?")
#: Error types pydantic defines; any other is an application's ``PydanticCustomError``,
#: whose text is the application's and may quote the value.
_PYDANTIC_ERROR_TYPES: frozenset[str] = frozenset(get_args(ErrorType))
#: What the model is told instead of a message that could quote the value.
_WITHHELD_MESSAGE = "Value is not valid"


def _describe_validation_error(
    error: pydantic.ValidationError, arguments: Mapping[str, Any], names: frozenset[str]
) -> str:
    """The problems, each naming the field, never a value: pydantic's input and the
    context that may quote it are left out, and keys of the model's own objects (a
    ``dict[str, int]`` argument) are shown as ``*`` unless the schema names them."""
    problems = []
    for item in error.errors(include_input=False, include_url=False):
        unknown = item["type"] == "extra_forbidden"
        where = _where(item["loc"], arguments, names, unknown=unknown)
        if unknown:
            problems.append(f"unknown field `{where}`")
        else:
            problems.append(f"`{where}`: {_message(item)}")
    return "Invalid arguments: " + "; ".join(problems[:5])


def _where(
    location: tuple[int | str, ...],
    arguments: Mapping[str, Any],
    names: frozenset[str],
    *,
    unknown: bool,
) -> str:
    """The dotted path of an error. A part that is a key of the arguments at that point
    is shown only if the schema declares it (or it is the unknown field itself); other
    parts are list indexes and pydantic's labels (a union member, ``[key]``)."""
    shown: list[str] = []
    here: Any = arguments
    for position, part in enumerate(location):
        if isinstance(here, Mapping) and part in here:
            last = position == len(location) - 1
            shown.append(str(part) if part in names or (unknown and last) else "*")
            here = here[part]
        elif isinstance(here, list) and isinstance(part, int) and 0 <= part < len(here):
            shown.append(str(part))
            here = here[part]
        else:
            shown.append(str(part))
    return ".".join(shown) or "<arguments>"


def _message(item: pydantic_core.ErrorDetails) -> str:
    """pydantic's message, without the parts of its context that may quote the value."""
    context = item.get("ctx") or {}
    error_type = item["type"]
    if not _is_pydantic_error_type(error_type):
        return _WITHHELD_MESSAGE
    if _QUOTING_CONTEXT.isdisjoint(context):
        return item["msg"]
    try:
        template = pydantic_core.PydanticKnownError(error_type, context).message_template
        return _QUOTING_PLACEHOLDER.sub("", template).format_map(context) or _WITHHELD_MESSAGE
    except (KeyError, ValueError, TypeError):  # a template this version does not expect
        return _WITHHELD_MESSAGE


def _is_pydantic_error_type(name: str) -> TypeGuard[ErrorType]:
    return name in _PYDANTIC_ERROR_TYPES


def _declared_names(schema: object) -> frozenset[str]:
    """Every property name anywhere in a JSON Schema (its ``$defs`` included)."""
    names: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            properties = node.get("properties")
            if isinstance(properties, dict):
                names.update(name for name in properties if isinstance(name, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return frozenset(names)


def _unknown_fields(arguments: Mapping[str, Any], known: set[str]) -> None:
    unknown = [name for name in arguments if name not in known]
    if unknown:
        fields = ", ".join(f"`{name}`" for name in unknown[:5])
        raise ArgumentsError(f"Invalid arguments: unknown field {fields}")


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
    func: Callable[..., Any],
    name: str,
    param_docs: Mapping[str, str],
    *,
    strict: bool,
    hints: Mapping[str, Any],
    context_parameter: str | None,
) -> tuple[dict[str, Any], Binder]:
    # Each parameter is a field of a generated name with the parameter's name as its
    # alias: a parameter may be called anything pydantic reserves on a model
    # (model_config, model_dump, _private, ...).
    fields: dict[str, Any] = {}
    parameters: dict[str, str] = {}  # field -> parameter
    for param in _parameters(func):
        if param.name == context_parameter:
            continue
        annotation = hints.get(param.name, Any)
        _check_expressible(name, param.name, annotation)
        field_name = f"p{len(fields)}"
        fields[field_name] = (
            annotation,
            _field_info(annotation, param, param_docs.get(param.name), alias=param.name),
        )
        parameters[field_name] = param.name
    model = pydantic.create_model(
        f"{name or 'function'}_arguments",
        __config__=pydantic.ConfigDict(
            extra="forbid" if strict else "ignore", arbitrary_types_allowed=False
        ),
        **fields,
    )
    assert issubclass(model, pydantic.BaseModel)
    schema = _clean_schema(model.model_json_schema())
    names = _declared_names(schema)

    def bind(arguments: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        try:
            validated = model.model_validate(dict(arguments))
        except pydantic.ValidationError as exc:
            raise ArgumentsError(_describe_validation_error(exc, arguments, names)) from None
        return (), {parameter: getattr(validated, field) for field, parameter in parameters.items()}

    return schema, bind


def _check_signature(func: Callable[..., Any], name: str) -> None:
    for param in _parameters(func):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            stars = "*" if param.kind is param.VAR_POSITIONAL else "**"
            raise AdmissionError(
                f"Function {name!r} takes {stars}{param.name}; a JSON Schema cannot "
                "describe variadic parameters. Name each parameter, or pass parameters=.",
                tool=name,
                field="parameters",
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise AdmissionError(
                f"Function {name!r} has positional-only parameter {param.name!r}; "
                "arguments arrive by name. Remove the `/`.",
                tool=name,
                field="parameters",
            )


def _type_hints(func: Callable[..., Any], name: str) -> dict[str, Any]:
    try:
        return get_type_hints(func, include_extras=True)
    except Exception as exc:  # NameError for a forward reference, TypeError, ...
        raise AdmissionError(
            f"Function {name!r} has type hints that cannot be resolved ({exc}); import "
            "the types they name where the function is defined.",
            tool=name,
            field="parameters",
        ) from None


def _check_expressible(name: str, parameter: str, annotation: Any) -> None:
    """Fail registration, naming the parameter, for a type pydantic cannot describe."""
    try:
        pydantic.TypeAdapter(annotation).json_schema()
    except pydantic.PydanticUserError:
        shown = (
            annotation.__qualname__
            if isinstance(annotation, type) and not get_args(annotation)
            else repr(annotation).replace("typing.", "").replace("collections.abc.", "")
        )
        raise AdmissionError(
            f"Function {name!r}: parameter {parameter!r} has type {shown}, which has no "
            "JSON Schema. Use JSON types (str, int, float, bool, list, dict, Literal, "
            "Enum), a pydantic model or dataclass, or pass parameters=.",
            tool=name,
            field=f"parameters.{parameter}",
        ) from None


def _context_parameter(name: str, hints: Mapping[str, Any], func: Callable[..., Any]) -> str | None:
    """The one parameter annotated ``CallContext`` (also inside ``Annotated``)."""
    found: list[str] = []
    for param in (parameter.name for parameter in _parameters(func)):
        annotation = hints.get(param)
        if get_origin(annotation) is Annotated:
            annotation = get_args(annotation)[0]
        if annotation is CallContext:
            found.append(param)
        elif get_origin(annotation) in (Union, types.UnionType) and CallContext in get_args(
            annotation
        ):
            raise AdmissionError(
                f"Function {name!r}: parameter {param!r} mixes CallContext into a union; "
                "the runner always passes one, so annotate it as plain CallContext.",
                tool=name,
                field=f"parameters.{param}",
            )
    if len(found) > 1:
        raise AdmissionError(
            f"Function {name!r} has more than one CallContext parameter "
            f"({', '.join(found)}); keep one.",
            tool=name,
            field="parameters",
        )
    return found[0] if found else None


def _field_info(
    annotation: Any, param: inspect.Parameter, doc: str | None, *, alias: str
) -> FieldInfo:
    """Precedence: ``Field(description=)`` > a string in ``Annotated`` > the docstring."""
    description = doc
    if get_origin(annotation) is Annotated:
        extras = get_args(annotation)[1:]
        if any(isinstance(extra, FieldInfo) and extra.description for extra in extras):
            description = None  # the Annotated Field already carries it
        else:
            description = next((e for e in reversed(extras) if isinstance(e, str)), doc)
    default = param.default if param.default is not param.empty else ...
    # An explicit description=None would replace the one an Annotated Field carries.
    info: FieldInfo = (
        pydantic.Field(default=default, alias=alias)
        if description is None
        else pydantic.Field(default=default, alias=alias, description=description)
    )
    return info


def _model_binder(
    model: type[pydantic.BaseModel], known: set[str] | None, names: frozenset[str]
) -> Binder:
    """The function receives one validated ``model``; with ``known``, other top-level
    names fail the call whatever the model's own ``extra`` setting."""

    def bind(arguments: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if known is not None:
            _unknown_fields(arguments, known)
        try:
            return (model.model_validate(dict(arguments)),), {}
        except pydantic.ValidationError as exc:
            raise ArgumentsError(_describe_validation_error(exc, arguments, names)) from None

    return bind


def _model_parameters(
    model: type[pydantic.BaseModel], name: str, *, strict: bool
) -> tuple[dict[str, Any], Binder]:
    """The schema and binder of ``parameters=model``, a ``RootModel`` or one that refers
    to itself included. The model validates the arguments; ``strict`` closes the top
    level unless the model's root is a mapping (``additionalProperties`` a schema)."""
    schema = _clean_schema(_inline_root_reference(model.model_json_schema()))
    if schema.get("type") != "object":
        raise AdmissionError(
            f"Function {name!r}: parameters model {model.__qualname__} describes a "
            f"{schema.get('type', 'value')}, but arguments are a JSON object. Use a model "
            "with fields (or a RootModel of a dict or of such a model).",
            tool=name or None,
            field="parameters",
        )
    known: set[str] | None = None
    if strict and not isinstance(schema.get("additionalProperties"), dict):
        schema["additionalProperties"] = False
        known = set(schema["properties"])
    return schema, _model_binder(model, known, _declared_names(schema))


def _inline_root_reference(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with a root ``$ref`` (a model that refers to itself, a RootModel of a
    model) replaced by the definition it names, so the root is an object the server
    accepts and properties can be added to. ``$defs`` stays for the references left
    inside; the inlined definition goes if nothing refers to it any more."""
    reference, definitions = schema.get("$ref"), schema.get("$defs")
    prefix = "#/$defs/"
    if not (
        isinstance(reference, str)
        and reference.startswith(prefix)
        and isinstance(definitions, dict)
        and isinstance(definitions.get(reference.removeprefix(prefix)), dict)
    ):
        return schema
    siblings = {key: value for key, value in schema.items() if key not in ("$ref", "$defs")}
    inlined: dict[str, Any] = {**definitions[reference.removeprefix(prefix)], **siblings}
    referred = json.dumps([inlined, definitions])
    remaining = {
        key: value for key, value in definitions.items() if json.dumps(prefix + key) in referred
    }
    if remaining:
        inlined["$defs"] = remaining
    return inlined


def _schema_binder(schema: Mapping[str, Any], *, strict: bool) -> Binder:
    """Checks required keys, and unknown keys when strict and the schema forbids them."""
    required = [name for name in schema.get("required", []) if isinstance(name, str)]
    properties = schema.get("properties")
    known = (
        set(properties)
        if strict
        and isinstance(properties, Mapping)
        and schema.get("additionalProperties") is False
        else None
    )

    def bind(arguments: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if known is not None:
            _unknown_fields(arguments, known)
        missing = [name for name in required if name not in arguments]
        if missing:
            fields = ", ".join(f"`{name}`" for name in missing)
            raise ArgumentsError(f"Invalid arguments: missing required {fields}")
        return (), dict(arguments)

    return bind


def _check_options(
    name: str, timeout: float | None, max_concurrency: int | None, max_attempts: int
) -> None:
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ValueError(
            f"Function {name!r}: timeout must be a positive number of seconds or None, "
            f"got {timeout!r}."
        )
    if max_concurrency is not None and (
        isinstance(max_concurrency, bool)
        or not isinstance(max_concurrency, int)
        or max_concurrency < 1
    ):
        raise ValueError(
            f"Function {name!r}: max_concurrency must be a whole number of at least 1 or "
            f"None, got {max_concurrency!r}."
        )
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ValueError(
            f"Function {name!r}: max_attempts must be a whole number of at least 1, "
            f"got {max_attempts!r}."
        )


def describe_function(
    func: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: Mapping[str, Any] | type[pydantic.BaseModel] | None = None,
    idempotent: bool = False,
    defer_loading: bool = False,
    strict: bool = True,
    timeout: float | None = None,
    max_concurrency: int | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> RegisteredFunction:
    """Build the declaration and argument binder for ``func``.

    ``parameters`` overrides the signature: a pydantic model (the function then receives
    one validated instance) or a JSON Schema dict (declared as given; checked for
    required keys, and for unknown keys when it says ``additionalProperties: false``;
    the function receives the arguments as keyword arguments). A parameter annotated
    :class:`CallContext` receives the call's context and is never declared.
    """
    if not callable(func):
        raise TypeError(f"Expected a callable, got {type(func).__name__}")
    doc = _docstring(func)
    fn_name = name if name is not None else _default_name(func)
    declaring = _declaring(func)
    if inspect.isgeneratorfunction(declaring) or inspect.isasyncgenfunction(declaring):
        raise AdmissionError(
            f"Function {fn_name!r} is a generator: a call gets one result, so return it "
            "(a list, if there are several values) instead of yielding.",
            tool=fn_name or None,
        )
    _check_options(fn_name, timeout, max_concurrency, max_attempts)
    hints = _type_hints(declaring, fn_name)
    context_parameter = _context_parameter(fn_name, hints, func)
    if isinstance(parameters, type) and issubclass(parameters, pydantic.BaseModel):
        schema, binder = _model_parameters(parameters, fn_name, strict=strict)
    elif parameters is not None:
        schema = dict(parameters)
        binder = _schema_binder(schema, strict=strict)
    else:
        _check_signature(func, fn_name)
        schema, binder = _signature_binder(
            func,
            fn_name,
            doc.params,
            strict=strict,
            hints=hints,
            context_parameter=context_parameter,
        )
    _check_json(fn_name, schema)
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
        strict=strict,
        context_parameter=context_parameter,
        timeout=timeout,
        max_concurrency=max_concurrency,
        max_attempts=max_attempts,
        _binder=binder,
    )
    check_tools([registered.declaration()], for_session=False)
    return registered


def _unpartial(func: Callable[..., Any]) -> Callable[..., Any]:
    """The callable under any ``functools.partial``."""
    while isinstance(func, functools.partial):
        func = func.func
    return func


def _is_callable_object(func: Callable[..., Any]) -> bool:
    """An instance whose class defines ``__call__`` (not a function, method or class)."""
    return not (inspect.isroutine(func) or isinstance(func, type))


def _declaring(func: Callable[..., Any]) -> Callable[..., Any]:
    """What declares ``func``'s type hints and kind (``def`` or ``async def``): the
    callable under partials, and the ``__call__`` of a callable object. A wrapper made
    with ``functools.wraps`` declares its own kind: a plain wrapper may well run the
    coroutine itself (as asgiref's ``async_to_sync`` does), so ``__wrapped__`` is not
    followed to decide how to call it."""
    inner = _unpartial(func)
    if _is_callable_object(inner):
        call: Callable[..., Any] = type(inner).__call__
        return call
    return inner


def _parameters(func: Callable[..., Any]) -> list[inspect.Parameter]:
    """The parameters the model fills: those of ``inspect.signature`` (which drops a
    partial's bound positions and an object's ``self``) less a partial's bound
    keywords, which the signature keeps as defaults the model could override."""
    bound = func.keywords if isinstance(func, functools.partial) else {}
    return [p for p in inspect.signature(func).parameters.values() if p.name not in bound]


def _default_name(func: Callable[..., Any]) -> str:
    """A function's ``__name__`` (under partials), or a callable object's class name."""
    inner = _unpartial(func)
    name = getattr(inner, "__name__", None)
    return name if isinstance(name, str) else type(inner).__name__


def _docstring(func: Callable[..., Any]) -> ParsedDocstring:
    """The docstring of the callable under partials; for a callable object, its class's
    description, and parameters documented on the class or on ``__call__``."""
    inner = _unpartial(func)
    doc = parse_docstring(inspect.getdoc(inner))
    if not _is_callable_object(inner):
        return doc
    call = parse_docstring(inspect.getdoc(type(inner).__call__))
    return ParsedDocstring(doc.description or call.description, {**doc.params, **call.params})


def _check_json(name: str, schema: Mapping[str, Any]) -> None:
    """Fail registration, naming the parameter, for a schema JSON cannot carry."""
    try:
        json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError) as exc:
        properties = schema.get("properties")
        where = next(
            (
                f"parameter {parameter!r}"
                for parameter, part in (properties if isinstance(properties, dict) else {}).items()
                if not _is_json(part)
            ),
            "its parameters",
        )
        raise AdmissionError(
            f"Function {name!r}: the JSON Schema of {where} cannot be sent as JSON ({exc}); "
            "a default of NaN or Infinity is the usual cause: use a finite default, or None.",
            tool=name or None,
            field="parameters",
        ) from None


def _is_json(value: object) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


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

    def __iter__(self) -> Iterator[RegisteredFunction]:
        return iter(list(self._functions.values()))

    def tools(self) -> list[dict[str, Any]]:
        return _declarations(list(self._functions.values()))


def _declarations(functions: list[RegisteredFunction]) -> list[dict[str, Any]]:
    tools = [function.declaration() for function in functions]
    if any(function.defer_loading for function in functions):
        # The contract requires tool_search exactly when some function is deferred.
        tools.append({"type": "tool_search"})
    return tools
