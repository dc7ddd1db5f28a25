"""Local admission checks for ``tools`` and ``text`` before anything is sent.

The server validates Agent and Session configuration in two stages, and these checks
mirror both so that a mistake is reported with the tool and field to fix, without a
round trip:

* Protocol checks run when an Agent is saved and when a Session is created. They
  follow the pinned request shapes (required, unknown and mistyped members, enum
  values), reject repeated function names, ``web_search`` and ``tool_search``, and
  reject an explicit non-object root ``type`` in a schema. Failures carry the code
  ``invalid_request_error``.
* Execution checks run only for a Session (``for_session=True``), because a saved
  Agent may keep declarations that no Harness can run yet. Failures carry the code
  ``unsupported_or_invalid_configuration``.

Checks run in the server's order: every tool's shape, then ``text``'s shape, then
repeated tools and schema roots, then execution rules. The first violation raises
:class:`~openagentcore._errors.AdmissionError`.

Content checks (:func:`check_tool_result_content`, :func:`check_message_content`)
cover what the server refuses before storing input: malformed parts, images other than
canonical inline PNG/JPEG data URIs, and a Harness's image and whitespace rules. A
refused result never consumes its pending call, so these only save a round trip.

Each error also carries the server's own wording where the contract gives one
(:meth:`~openagentcore.AdmissionError.server_error`), which the local emulator answers
with.

Inputs are plain JSON-like data (a pydantic model dumped with ``model_dump()`` works).
JSON numbers may be ``int``, ``float`` or :class:`decimal.Decimal` (for example from
``json.loads(text, parse_float=Decimal, parse_int=Decimal)``, which keeps the digits
the caller wrote). Messages repeat a caller's name only when it is printable and at
most 256 bytes of UTF-8; otherwise they point at the position, such as ``tools[3]``.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, NoReturn
from urllib.parse import urlsplit

from ._errors import SERVER_PATH, AdmissionError

__all__ = [
    "HARNESSES",
    "MAX_FUNCTION_NAME_BYTES",
    "MAX_SESSION_FUNCTIONS",
    "check_image_url",
    "check_message_content",
    "check_session_config",
    "check_text",
    "check_tool_result_content",
    "check_tools",
    "survives_binary64",
]

PROTOCOL_ERROR = "invalid_request_error"
UNSUPPORTED = "unsupported_or_invalid_configuration"

#: Harness identifiers of the pinned ``x_agents_core.harness`` enum.
HARNESSES = ("codex", "claude_sdk", "mcode")
_CLAUDE = "claude_sdk"

MAX_SESSION_FUNCTIONS = 64
MAX_FUNCTION_NAME_BYTES = 512
_FUNCTION_NAME_RULE = (
    f"Function names must be nonempty, unique and at most {MAX_FUNCTION_NAME_BYTES} bytes."
)
_MAX_ECHO_BYTES = 256


def check_tools(tools: Sequence[Mapping[str, Any]], *, for_session: bool) -> None:
    """Raise :class:`AdmissionError` for the first rule ``tools`` breaks.

    ``for_session=False`` applies the protocol checks a saved Agent gets;
    ``for_session=True`` adds the execution rules every Session must pass.
    """
    declared = _check_tool_shapes(tools, for_session=for_session)
    _check_tool_conflicts(declared)
    if for_session:
        _check_tool_execution(declared)


def check_text(
    text: Mapping[str, Any] | None, *, harness: str | None = None, for_session: bool
) -> None:
    """Raise :class:`AdmissionError` for the first rule ``text`` breaks.

    ``harness`` is the Session's ``x_agents_core.harness`` (``"codex"``,
    ``"claude_sdk"`` or ``"mcode"``); ``None`` means the deployment default, which is
    unknown here, so only Harness-independent rules apply.
    """
    _check_harness(harness)
    if text is None:
        return
    _check_text_shape(text)
    _check_schema_root(text)
    if for_session:
        _check_text_execution(text, harness)


def check_session_config(
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    text: Mapping[str, Any] | None = None,
    harness: str | None = None,
) -> None:
    """Run every Session admission check, including rules that span tools and text."""
    _check_harness(harness)
    declared = _check_tool_shapes(tools or (), for_session=True)
    if text is not None:
        _check_text_shape(text)
    _check_tool_conflicts(declared)
    if text is not None:
        _check_schema_root(text)
    _check_tool_execution(declared)
    if text is not None:
        _check_text_execution(text, harness)
    if harness is not None:
        _check_harness_tools(declared, harness, structured=_is_structured(text))


# Value kinds of the pinned request shapes.


@dataclass(frozen=True)
class _Kind:
    description: str
    accepts: Callable[[object], bool]
    #: For enums: the supported values, so the message can list them.
    choices: tuple[str, ...] = ()


def _nullable(kind: _Kind) -> _Kind:
    return _Kind(
        f"{kind.description} or null",
        lambda v: v is None or kind.accepts(v),
        (*kind.choices, "null") if kind.choices else (),
    )


def _enum(*choices: str) -> _Kind:
    return _Kind("a string", lambda v: isinstance(v, str) and v in choices, choices)


def _is_string_list(value: object) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, (str, bytes))
        and all(isinstance(item, str) for item in value)
    )


def _is_string_map(value: object) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(key, str) and isinstance(item, str) for key, item in value.items()
    )


_STRING = _Kind("a string", lambda v: isinstance(v, str))
_BOOLEAN = _Kind("a boolean", lambda v: isinstance(v, bool))
_OBJECT = _Kind("an object", lambda v: isinstance(v, Mapping))
_STRING_LIST = _Kind("an array of strings", _is_string_list)
_STRING_MAP = _Kind("an object with string values", _is_string_map)


@dataclass(frozen=True)
class _Shape:
    members: Mapping[str, _Kind]
    required: tuple[str, ...] = ()


_TOOL_SHAPES: Mapping[str, _Shape] = {
    "function": _Shape(
        {
            "name": _STRING,
            "description": _STRING,
            "parameters": _OBJECT,
            "defer_loading": _BOOLEAN,
            "async": _BOOLEAN,
        },
        required=("description", "name", "parameters"),
    ),
    "tool_search": _Shape({}),
    "programmatic_tool_calling": _Shape({"enabled": _BOOLEAN}),
    "web_search": _Shape(
        {
            "allowed_domains": _nullable(_STRING_LIST),
            "context_size": _nullable(_enum("low", "medium", "high")),
            "location": _nullable(_OBJECT),
            "mode": _nullable(_enum("disabled", "cached", "live")),
        }
    ),
    "mcp": _Shape(
        {
            "server_label": _STRING,
            "transport": _OBJECT,
            "allowed_tools": _nullable(_STRING_LIST),
            "connection_origin": _nullable(_enum("service", "environment")),
            "credential_id": _nullable(_STRING),
            "request_metadata": _nullable(_OBJECT),
            "required": _BOOLEAN,
        },
        required=("server_label", "transport"),
    ),
    "computer_use": _Shape({"include_screenshots": _BOOLEAN}),
    "automations": _Shape({}),
}
_TOOL_TYPES = _enum(*_TOOL_SHAPES)

_LOCATION_SHAPE = _Shape(
    {key: _nullable(_STRING) for key in ("city", "country", "region", "timezone")}
)

# A saved Agent stores the credential-free transport; an inline Session may also carry
# ``authorization`` and stdio ``env``, which execution then rejects.
_SAVED_TRANSPORT_SHAPES: Mapping[str, _Shape] = {
    "http": _Shape({"server_url": _STRING, "headers": _nullable(_STRING_MAP)}, ("server_url",)),
    "stdio": _Shape(
        {
            "command": _STRING,
            "cwd": _STRING,
            "args": _nullable(_STRING_LIST),
            "env_vars": _nullable(_STRING_LIST),
        },
        ("command", "cwd"),
    ),
}
_SESSION_TRANSPORT_SHAPES: Mapping[str, _Shape] = {
    "http": _Shape(
        {**_SAVED_TRANSPORT_SHAPES["http"].members, "authorization": _nullable(_STRING)},
        ("server_url",),
    ),
    "stdio": _Shape(
        {**_SAVED_TRANSPORT_SHAPES["stdio"].members, "env": _nullable(_STRING_MAP)},
        ("command", "cwd"),
    ),
}
_TRANSPORT_TYPES = _enum(*_SAVED_TRANSPORT_SHAPES)

_TEXT_SHAPE = _Shape(
    {"format": _nullable(_OBJECT), "verbosity": _nullable(_enum("low", "medium", "high"))}
)
_FORMAT_SHAPES: Mapping[str, _Shape] = {
    "text": _Shape({}),
    "json_schema": _Shape({"schema": _OBJECT}, required=("schema",)),
}
_FORMAT_TYPES = _enum(*_FORMAT_SHAPES)
# Responses API ``json_schema`` formats wrap the schema with these; Agents does not.
_RESPONSES_WRAPPER_HINTS: Mapping[object, str] = dict.fromkeys(
    ("name", "strict", "description"),
    " The Agents API format is only {type, schema}: drop the Responses API wrapper fields.",
)


# Tool declarations.


@dataclass(frozen=True)
class _Tool:
    """One declaration whose shape passed, with what messages need to name it."""

    index: int
    type: str
    declaration: Mapping[str, Any]
    label: str

    def fail(
        self, problem: str, *, member: str | None, code: str, server_message: str | None = None
    ) -> NoReturn:
        """Raise with the SDK's ``problem``; ``server_message`` is the server's wording
        where the contract gives one (its param is then null)."""
        path = f"tools[{self.index}]" + (f".{member}" if member else "")
        named = "" if self.label == f"tools[{self.index}]" else f" ({self.type} '{self.label}')"
        raise AdmissionError(
            f"{path}{named}: {problem}",
            tool=self.label,
            field=path,
            code=code,
            server_message=server_message,
        )

    @property
    def deferred(self) -> bool:
        return self.type == "function" and self.declaration.get("defer_loading") is True


def _check_tool_shapes(tools: Sequence[Mapping[str, Any]], *, for_session: bool) -> list[_Tool]:
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence):
        raise AdmissionError(
            "tools: expected an array of tool declarations.",
            field="tools",
            code=PROTOCOL_ERROR,
            server_message=_wrong_type("an array", tools),
            server_path="tools",
        )
    declared: list[_Tool] = []
    for index, declaration in enumerate(tools):
        label = _tool_label(index, declaration)
        path = f"tools[{index}]"
        if not isinstance(declaration, Mapping):
            raise AdmissionError(
                f"{path}: expected an object such as "
                '{"type": "function", "name": ..., "description": ..., "parameters": {...}}.',
                tool=label,
                field=path,
                code=PROTOCOL_ERROR,
                server_message=_wrong_type("an object", declaration),
                server_path=path,
            )
        tool_type = _check_union_type(declaration, _TOOL_TYPES, path=path, tool=label)
        _check_members(declaration, _TOOL_SHAPES[tool_type], path=path, tool=label, skip="type")
        if tool_type == "web_search" and declaration.get("location") is not None:
            _check_members(
                declaration["location"], _LOCATION_SHAPE, path=f"{path}.location", tool=label
            )
        if tool_type == "mcp":
            shapes = _SESSION_TRANSPORT_SHAPES if for_session else _SAVED_TRANSPORT_SHAPES
            transport = declaration["transport"]
            transport_path = f"{path}.transport"
            transport_type = _check_union_type(
                transport, _TRANSPORT_TYPES, path=transport_path, tool=label
            )
            _check_members(
                transport, shapes[transport_type], path=transport_path, tool=label, skip="type"
            )
        declared.append(_Tool(index, tool_type, declaration, label))
    return declared


def _check_tool_conflicts(declared: Sequence[_Tool]) -> None:
    """Repeated names and singleton tools, and non-object schema roots (protocol errors)."""
    seen_names: set[str] = set()
    seen_singletons: set[str] = set()
    for tool in declared:
        if tool.type == "function":
            name = tool.declaration["name"]
            if name in seen_names:
                shown = _echo(name)
                tool.fail(
                    "another function already has this name; give each function a unique name.",
                    member="name",
                    code=PROTOCOL_ERROR,
                    server_message="duplicate function tool name"
                    + (f": {shown}" if shown is not None else ""),
                )
            seen_names.add(name)
            root = tool.declaration["parameters"].get("type")
            if isinstance(root, str) and root != "object":
                tool.fail(
                    f'the schema root must have type "object"{_got(root)}; wrap the arguments '
                    'in {"type": "object", "properties": {...}}.',
                    member="parameters.type",
                    code=PROTOCOL_ERROR,
                    server_message=_function_schema_root_message(name, root),
                )
        elif tool.type in ("web_search", "tool_search"):
            if tool.type in seen_singletons:
                tool.fail(
                    f"only one {tool.type} tool is allowed; remove the repeated declaration.",
                    member="type",
                    code=PROTOCOL_ERROR,
                    server_message=f"duplicate {tool.type} tool",
                )
            seen_singletons.add(tool.type)


def _check_tool_execution(declared: Sequence[_Tool]) -> None:
    """Rules every Harness applies at Session creation; saved Agents skip them."""
    functions = [tool for tool in declared if tool.type == "function"]
    if len(functions) > MAX_SESSION_FUNCTIONS:
        raise AdmissionError(
            f"tools: a Session can run at most {MAX_SESSION_FUNCTIONS} functions, "
            f"got {len(functions)} (deferred ones count too); drop some or split them "
            "across Agents.",
            code=UNSUPPORTED,
            server_message=f"This service supports at most {MAX_SESSION_FUNCTIONS} function tools.",
        )
    programmatic_seen = False
    seen_labels: set[str] = set()
    for tool in declared:
        if tool.type == "function":
            _check_function_name(tool)
        elif tool.type == "web_search":
            if tool.declaration.get("mode") != "disabled":
                tool.fail(
                    'Sessions run web_search only with mode "disabled"; set it explicitly '
                    "(an omitted or null mode means live search).",
                    member="mode",
                    code=UNSUPPORTED,
                    server_message="Only disabled web_search is qualified for execution.",
                )
        elif tool.type == "programmatic_tool_calling":
            if programmatic_seen:
                tool.fail(
                    "declare programmatic_tool_calling at most once.",
                    member="type",
                    code=UNSUPPORTED,
                    server_message="Execution requires distinct tool controls.",
                )
            programmatic_seen = True
            if tool.declaration.get("enabled") is not False:
                tool.fail(
                    'Sessions run programmatic_tool_calling only with "enabled": false; set it '
                    "explicitly (omitted means enabled).",
                    member="enabled",
                    code=UNSUPPORTED,
                )
        elif tool.type == "mcp":
            _check_mcp_execution(tool, seen_labels)
        elif tool.type in ("computer_use", "automations"):
            tool.fail(
                f"no Harness runs {tool.type} tools; remove the declaration for this Session.",
                member="type",
                code=UNSUPPORTED,
            )
    _check_tool_search_pairing(declared)


def _check_function_name(tool: _Tool) -> None:
    name: str = tool.declaration["name"]
    if not name.strip():
        tool.fail(
            "the name is blank; give the function a name.",
            member="name",
            code=UNSUPPORTED,
            server_message=_FUNCTION_NAME_RULE,
        )
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > MAX_FUNCTION_NAME_BYTES:
        tool.fail(
            f"the name is {size} bytes of UTF-8; Sessions accept at most "
            f"{MAX_FUNCTION_NAME_BYTES}.",
            member="name",
            code=UNSUPPORTED,
            server_message=_FUNCTION_NAME_RULE,
        )


def _check_tool_search_pairing(declared: Sequence[_Tool]) -> None:
    """``tool_search`` must be declared exactly when some function is deferred."""
    search = next((tool for tool in declared if tool.type == "tool_search"), None)
    deferred = next((tool for tool in declared if tool.deferred), None)
    if search is not None and deferred is None:
        search.fail(
            "tool_search needs at least one function with defer_loading: true; "
            "defer a function or remove tool_search.",
            member="type",
            code=UNSUPPORTED,
        )
    if deferred is not None and search is None:
        deferred.fail(
            'deferred functions are discovered through tool_search; add {"type": '
            '"tool_search"} to tools or set defer_loading to false.',
            member="defer_loading",
            code=UNSUPPORTED,
        )


def _check_mcp_execution(tool: _Tool, seen_labels: set[str]) -> None:
    # The official client's types also allow stdio transports, literal headers and
    # request metadata. The contract (execution-tools.md, HTTP MCP) admits none of them
    # for execution, and the contract wins.
    label: str = tool.declaration["server_label"]
    if not label.strip():
        tool.fail(
            "server_label is blank; name the server.", member="server_label", code=UNSUPPORTED
        )
    if label in seen_labels:
        tool.fail(
            "another MCP server already uses this server_label; give each server its own label.",
            member="server_label",
            code=UNSUPPORTED,
            server_message="Execution requires distinct MCP server labels.",
        )
    seen_labels.add(label)
    transport: Mapping[str, Any] = tool.declaration["transport"]
    if transport["type"] != "http":
        tool.fail(
            'Sessions connect to MCP servers over HTTP only; use {"type": "http", '
            '"server_url": "https://..."}.',
            member="transport.type",
            code=UNSUPPORTED,
        )
    url_problem = _server_url_problem(transport["server_url"])
    if url_problem:
        tool.fail(url_problem, member="transport.server_url", code=UNSUPPORTED)
    if transport.get("headers"):
        tool.fail(
            "custom headers are not sent; remove them and attach a Vault credential for "
            "authentication.",
            member="transport.headers",
            code=UNSUPPORTED,
        )
    if transport.get("authorization") is not None:
        # The contract routes MCP bearer tokens through Vault credentials only; an inline
        # ``authorization`` would put a secret into the frozen Session configuration.
        tool.fail(
            "inline authorization is not accepted; attach a Vault credential and set "
            "credential_id instead.",
            member="transport.authorization",
            code=UNSUPPORTED,
        )
    if tool.declaration.get("request_metadata"):
        tool.fail(
            "request_metadata is not supported; remove it or pass an empty object.",
            member="request_metadata",
            code=UNSUPPORTED,
        )


def _server_url_problem(url: str) -> str | None:
    hint = "use an absolute http(s) URL such as https://mcp.example.com/mcp"
    if any(char.isspace() or not char.isprintable() for char in url):
        return f"server_url contains whitespace or control characters; {hint}."
    try:
        parts = urlsplit(url)
        _ = parts.port  # reading the port validates it
    except ValueError:
        return f"server_url is not a valid URL; {hint}."
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return f"server_url must be absolute with an http or https scheme; {hint}."
    if "@" in parts.netloc:
        return "server_url must not contain credentials; attach a Vault credential instead."
    if "?" in url or "#" in url:
        return "server_url must not contain a query or fragment; remove everything after the path."
    return None


# Text configuration.


def _check_text_shape(text: Mapping[str, Any]) -> None:
    if not isinstance(text, Mapping):
        raise AdmissionError(
            "text: expected an object.",
            field="text",
            code=PROTOCOL_ERROR,
            server_message=_wrong_type("an object", text),
            server_path="text",
        )
    _check_members(text, _TEXT_SHAPE, path="text", tool=None)
    text_format = text.get("format")
    if text_format is None:
        return
    format_type = _check_union_type(text_format, _FORMAT_TYPES, path="text.format", tool=None)
    _check_members(
        text_format,
        _FORMAT_SHAPES[format_type],
        path="text.format",
        tool=None,
        skip="type",
        hints=_RESPONSES_WRAPPER_HINTS,
    )


def _check_schema_root(text: Mapping[str, Any]) -> None:
    schema = _output_schema(text)
    root = None if schema is None else schema.get("type")
    if isinstance(root, str) and root != "object":
        raise AdmissionError(
            f'text.format.schema: the root must have type "object"{_got(root)}; wrap the '
            'output in {"type": "object", "properties": {...}}.',
            field="text.format.schema.type",
            code=PROTOCOL_ERROR,
            # The server names the inline path even on Agent requests (wire-semantics.md).
            server_message='agent.text.format.schema must have top-level type "object"'
            + (f'; got "{root}"' if _echo(root) is not None else ""),
        )


def _check_text_execution(text: Mapping[str, Any], harness: str | None) -> None:
    if harness is None:
        return
    verbosity = text.get("verbosity")
    if harness in ("claude_sdk", "mcode") and verbosity not in (None, "medium"):
        raise AdmissionError(
            f'text.verbosity: the {harness} Harness runs only "medium" verbosity; '
            "set it to medium or omit it.",
            field="text.verbosity",
            code=UNSUPPORTED,
        )
    schema = _output_schema(text)
    if schema is None:
        return
    if harness != _CLAUDE:
        raise AdmissionError(
            f"text.format: the {harness} Harness does not run structured output; use "
            f'{{"type": "text"}} or the {_CLAUDE} Harness.',
            field="text.format.type",
            code=UNSUPPORTED,
        )
    if schema.get("type") != "object":
        raise AdmissionError(
            f'text.format.schema: the {_CLAUDE} Harness needs an explicit "type": "object" '
            "at the schema root; add it.",
            field="text.format.schema.type",
            code=UNSUPPORTED,
        )
    for path, number in _schema_numbers(schema, "text.format.schema"):
        if not survives_binary64(number):
            raise AdmissionError(
                f"{path}: this number changes when read as an IEEE 754 double, as the "
                f"{_CLAUDE} Harness reads it; use a value a double represents (integers "
                "up to 2**53 are always safe).",
                field=path,
                code=UNSUPPORTED,
            )


def survives_binary64(number: int | float | Decimal) -> bool:
    """Whether ``number`` reads back unchanged after a trip through a binary64 double.

    The double is written back as its shortest round-trip decimal (Python ``repr``,
    JavaScript ``Number#toString`` and Go ``strconv.FormatFloat(f, 'g', -1, 64)``
    agree), and the two values must be equal. So ``0.1`` passes, while ``2**53 + 1``,
    ``1e400`` (overflows), ``1e-400`` (underflows to 0) and 20 significant digits
    fail. A ``float`` passes when finite: it already is a double.
    """
    try:
        as_double = float(number)
    except (OverflowError, ValueError):  # ValueError: a signalling Decimal NaN
        return False
    if not math.isfinite(as_double):
        return False
    if isinstance(number, float):
        return True
    try:
        return Decimal(repr(as_double)) == Decimal(number)
    except InvalidOperation:
        return False


def _schema_numbers(
    schema: Mapping[str, Any], root: str
) -> Iterator[tuple[str, int | float | Decimal]]:
    """Every JSON number in ``schema`` with its path, without recursion limits."""
    pending: list[tuple[str, object]] = [(root, schema)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float, Decimal)):
            yield path, value
        elif isinstance(value, Mapping):
            pending.extend(
                (f"{path}.{_path_key(key)}", item) for key, item in reversed(list(value.items()))
            )
        elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
            pending.extend((f"{path}[{i}]", item) for i, item in reversed(list(enumerate(value))))


def _path_key(key: object) -> str:
    shown = _echo(key) if isinstance(key, str) else None
    return shown if shown is not None else "<member>"


def _output_schema(text: Mapping[str, Any]) -> Mapping[str, Any] | None:
    text_format = text.get("format")
    if isinstance(text_format, Mapping) and text_format.get("type") == "json_schema":
        schema: Mapping[str, Any] = text_format["schema"]
        return schema
    return None


def _is_structured(text: Mapping[str, Any] | None) -> bool:
    return text is not None and _output_schema(text) is not None


# Harness profiles.


def _check_harness(harness: str | None) -> None:
    if harness is not None and harness not in HARNESSES:
        shown = _echo(harness) if isinstance(harness, str) else None
        raise AdmissionError(
            f"x_agents_core.harness: unknown Harness{_got(shown)}; use one of "
            f"{', '.join(HARNESSES)}.",
            field="x_agents_core.harness",
            code=PROTOCOL_ERROR,
        )


def _check_harness_tools(declared: Sequence[_Tool], harness: str, *, structured: bool) -> None:
    """Tool combinations a Harness's profile rejects (see harness-capabilities.md)."""
    has_search = any(tool.type == "tool_search" for tool in declared)
    for tool in declared:
        if tool.type == "function" and harness == "mcode":
            tool.fail(
                "the mcode Harness does not run application functions; use codex or claude_sdk.",
                member="type",
                code=UNSUPPORTED,
            )
        if tool.type == "tool_search" and harness != _CLAUDE:
            tool.fail(
                f"deferred function discovery runs only on the {_CLAUDE} Harness; remove "
                "tool_search and defer_loading or switch Harness.",
                member="type",
                code=UNSUPPORTED,
            )
        if tool.type == "tool_search" and structured:
            tool.fail(
                "tool_search cannot be combined with structured output (text.format "
                "json_schema); drop one of them.",
                member="type",
                code=UNSUPPORTED,
            )
        if tool.type == "mcp":
            _check_mcp_for_harness(tool, harness, structured=structured, has_search=has_search)


def _check_mcp_for_harness(
    tool: _Tool, harness: str, *, structured: bool, has_search: bool
) -> None:
    if harness == "mcode" and tool.declaration.get("required") is True:
        tool.fail(
            "the mcode Harness cannot wait for MCP initialization; set required to false.",
            member="required",
            code=UNSUPPORTED,
        )
    if harness != _CLAUDE:
        return
    if structured or has_search:
        feature = "structured output" if structured else "tool_search"
        tool.fail(
            f"on the {_CLAUDE} Harness, MCP servers cannot be combined with {feature}; "
            "drop one of them.",
            member="type",
            code=UNSUPPORTED,
        )
    label: str = tool.declaration["server_label"]
    if label == "functions" or not all(
        char.isascii() and (char.isalnum() or char in "_-") for char in label
    ):
        tool.fail(
            f"the {_CLAUDE} Harness accepts server_label made of ASCII letters, digits, "
            '"_" and "-", other than "functions"; rename the server.',
            member="server_label",
            code=UNSUPPORTED,
        )


# Shape helpers.


def _check_union_type(value: object, kind: _Kind, *, path: str, tool: str | None) -> str:
    if not isinstance(value, Mapping):
        raise AdmissionError(
            f"{path}: expected an object.",
            tool=tool,
            field=path,
            code=PROTOCOL_ERROR,
            server_message=_wrong_type("an object", value),
            server_path=path,
        )
    if "type" not in value:
        raise AdmissionError(
            f"{path}.type is required; use one of {', '.join(kind.choices)}.",
            tool=tool,
            field=f"{path}.type",
            code=PROTOCOL_ERROR,
            server_message=f"Missing required parameter: '{SERVER_PATH}'.",
            server_path=f"{path}.type",
        )
    _check_value(value["type"], kind, path=f"{path}.type", tool=tool)
    declared_type: str = value["type"]
    return declared_type


def _check_members(
    value: Mapping[str, Any],
    shape: _Shape,
    *,
    path: str,
    tool: str | None,
    skip: str = "",
    hints: Mapping[object, str] | None = None,
) -> None:
    """Unknown members first, then member values, then missing members, as the server does."""
    hints = hints or {}
    for key in value:
        if key != skip and key not in shape.members:
            shown = _echo(key) if isinstance(key, str) else None
            member = f"{path}.{shown}" if shown else path
            allowed = ", ".join([skip, *shape.members] if skip else shape.members)
            raise AdmissionError(
                f"{member}: unknown member{'' if shown else ' (name not shown)'}; "
                f"accepted members are {allowed}.{hints.get(key, '')}",
                tool=tool,
                field=member,
                code=PROTOCOL_ERROR,
                server_message=f"Unknown parameter: '{SERVER_PATH}'."
                if shown
                else "Unknown parameter.",
                server_path=member if shown else None,
            )
    for key, item in value.items():
        if key != skip:
            _check_value(item, shape.members[key], path=f"{path}.{key}", tool=tool)
    for key in shape.required:
        if key not in value:
            raise AdmissionError(
                f"{path}.{key} is required.",
                tool=tool,
                field=f"{path}.{key}",
                code=PROTOCOL_ERROR,
                server_message=f"Missing required parameter: '{SERVER_PATH}'.",
                server_path=f"{path}.{key}",
            )


def _check_value(value: object, kind: _Kind, *, path: str, tool: str | None) -> None:
    if kind.accepts(value):
        return
    if kind.choices and isinstance(value, str):
        problem = f"unsupported value{_got(_echo(value))}; use one of {', '.join(kind.choices)}"
        shown = _echo(value)
        supported = [f"'{choice}'" for choice in kind.choices if choice != "null"]
        listed = (
            ", ".join(supported[:-1]) + " and " + supported[-1]
            if len(supported) > 1
            else supported[0]
        )
        server = f"Invalid value: '{shown}'." if shown is not None else "Invalid value."
        server += f" Supported values are: {listed}."
    else:
        problem = f"expected {kind.description}, got {_json_kind(value)}"
        server = _wrong_type(kind.description, value)
    raise AdmissionError(
        f"{path}: {problem}.",
        tool=tool,
        field=path,
        code=PROTOCOL_ERROR,
        server_message=server,
        server_path=path,
    )


def _wrong_type(expected: str, value: object) -> str:
    got = _json_kind(value)
    return f"Invalid type for '{SERVER_PATH}': expected {expected}, but got {got} instead."


def _function_schema_root_message(name: object, root: str) -> str:
    shown_name = _echo(name) if isinstance(name, str) else None
    shown_root = _echo(root)
    if shown_name is None or shown_root is None:
        return "Invalid schema for function: schema must be a JSON Schema of 'type: \"object\"'."
    return (
        f"Invalid schema for function '{shown_name}': schema must be a JSON Schema of "
        f"'type: \"object\"', got 'type: \"{shown_root}\"'."
    )


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float, Decimal)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, Sequence) and not isinstance(value, bytes):
        return "an array"
    return f"a Python {type(value).__name__}"


def _tool_label(index: int, declaration: object) -> str:
    if isinstance(declaration, Mapping):
        key = "server_label" if declaration.get("type") == "mcp" else "name"
        name = declaration.get(key)
        if isinstance(name, str) and name.strip():
            shown = _echo(name)
            if shown is not None:
                return shown
    return f"tools[{index}]"


def _echo(value: str) -> str | None:
    """``value`` when a message may repeat it: printable and at most 256 bytes."""
    if value.isprintable() and len(value.encode("utf-8", "surrogatepass")) <= _MAX_ECHO_BYTES:
        return value
    return None


def _got(shown: str | None) -> str:
    return f", got '{shown}'" if shown is not None and _echo(shown) is not None else ""


# Message and function-result content (message-content.md).

#: Magic bytes of the image types a data URI may declare.
_IMAGE_SIGNATURES: Mapping[str, bytes] = {
    "image/png": b"\x89PNG\r\n\x1a\n",
    "image/jpeg": b"\xff\xd8\xff",
}
#: The server's whitespace: Go's ``unicode.IsSpace`` together with what ECMAScript's
#: ``String.prototype.trim`` removes (Python's ``str.isspace`` differs from both).
_WHITESPACE = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_TEXT_ONLY_RESULTS = (_CLAUDE,)
_NO_MESSAGE_IMAGES = ("mcode",)
_NO_WHITESPACE_ONLY = (_CLAUDE, "mcode")


def check_image_url(image_url: object, *, field: str = "image_url") -> None:
    """Raise :class:`AdmissionError` unless ``image_url`` is an inline PNG or JPEG
    data URI with canonical base64 whose bytes match the declared type."""
    hint = 'use "data:image/png;base64,..." or "data:image/jpeg;base64,..."'
    if not isinstance(image_url, str) or not image_url.startswith("data:"):
        raise _content_error(
            f"{field}: only inline data URIs are accepted, not remote URLs or file IDs; {hint}.",
            field,
        )
    header, comma, payload = image_url[len("data:") :].partition(",")
    media_type, _, encoding = header.partition(";")
    if not comma or encoding != "base64" or media_type not in _IMAGE_SIGNATURES:
        raise _content_error(
            f"{field}: only base64 PNG and JPEG images are accepted; {hint}.", field
        )
    try:
        data = base64.b64decode(payload, validate=True)
    except binascii.Error:
        data = b""
    if not data or base64.b64encode(data).decode("ascii") != payload:
        raise _content_error(
            f"{field}: the base64 payload is not canonical (padding, line breaks or stray "
            "bits); encode the image bytes with standard base64.",
            field,
        )
    if not data.startswith(_IMAGE_SIGNATURES[media_type]):
        raise _content_error(
            f"{field}: the bytes are not a {media_type.removeprefix('image/').upper()} image; "
            "declare the type the bytes have (PNG or JPEG).",
            field,
        )


def check_message_content(
    content: Sequence[Mapping[str, Any]], *, harness: str | None = None, field: str = "content"
) -> None:
    """Raise :class:`AdmissionError` for message content the server or the Session's
    Harness refuses: malformed parts, images other than inline PNG/JPEG, images on a
    Harness without message images, and whitespace-only text where it cannot run."""
    _check_harness(harness)
    _check_parts(content, field)
    has_image = any(part["type"] == "input_image" for part in content)
    if has_image and harness in _NO_MESSAGE_IMAGES:
        raise AdmissionError(
            f"{field}: the {harness} Harness takes no message images; send text only.",
            field=field,
            code=UNSUPPORTED,
        )
    if (
        harness in _NO_WHITESPACE_ONLY
        and not has_image
        and all(_is_blank(part["text"]) for part in content)
    ):
        raise AdmissionError(
            f"{field}: the {harness} Harness cannot run a message whose text is only "
            "whitespace; add non-whitespace text or an image.",
            field=field,
            code=UNSUPPORTED,
        )


def check_tool_result_content(
    output: object, error: object = None, *, success: bool, harness: str | None = None
) -> None:
    """Raise :class:`AdmissionError` for a function result the server would refuse.

    A refused result never consumes the pending call, so checking before posting
    only saves a round trip. ``output`` is a string, ``None`` or ``input_text`` and
    ``input_image`` parts (images inline PNG/JPEG data URIs); ``error`` a string or
    ``None``. ``harness`` adds its rules: ``claude_sdk`` takes images only in
    successful results, and ``mcode`` runs no application functions.
    """
    _check_harness(harness)
    if harness == "mcode":
        raise AdmissionError(
            "the mcode Harness runs no application functions, so it takes no results.",
            field="output",
            code=UNSUPPORTED,
        )
    if isinstance(output, str):
        _check_storable(output, "output")
    elif isinstance(output, Sequence) and not isinstance(output, (bytes, bytearray)):
        _check_parts(output, "output")
        has_image = any(part["type"] == "input_image" for part in output)
        if has_image and not success and harness in _TEXT_ONLY_RESULTS:
            raise AdmissionError(
                f"output: the {harness} Harness takes images only in successful results; "
                "describe the failure in text.",
                field="output",
                code=UNSUPPORTED,
            )
    elif output is not None:
        raise _content_error(
            f"output: expected a string, content parts or null, got {_json_kind(output)}.",
            "output",
        )
    if isinstance(error, str):
        _check_storable(error, "error")
    elif error is not None:
        raise _content_error(f"error: expected a string or null, got {_json_kind(error)}.", "error")


def _check_parts(parts: object, field: str) -> None:
    if isinstance(parts, (str, bytes, Mapping)) or not isinstance(parts, Sequence):
        raise _content_error(f"{field}: expected an array of content parts.", field)
    for index, part in enumerate(parts):
        where = f"{field}[{index}]"
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "input_text" and set(part) == {"type", "text"} and isinstance(part["text"], str):
            _check_storable(part["text"], f"{where}.text")
        elif kind == "input_image" and set(part) == {"type", "image_url"}:
            check_image_url(part["image_url"], field=f"{where}.image_url")
        else:
            raise _content_error(
                f'{where}: expected {{"type": "input_text", "text": ...}} or '
                '{"type": "input_image", "image_url": "data:..."} with no other members.',
                where,
            )


def _check_storable(text: str, field: str) -> None:
    if "\x00" in text:
        raise _content_error(
            f"{field}: U+0000 cannot be stored; remove NUL characters from the text.", field
        )


def _is_blank(text: str) -> bool:
    return all(char in _WHITESPACE for char in text)


def _content_error(message: str, field: str) -> AdmissionError:
    # Core's local code for malformed content (error-codes.md, invalid_request).
    return AdmissionError(message, field=field, code="invalid_request")
