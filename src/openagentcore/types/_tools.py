"""Tool declarations and the output format of an Agent.

Optional fields default to ``None`` (or the server's saved default), so a declaration
built in code and sent with :meth:`~openagentcore.types.WireModel.to_wire` carries only
what the caller chose; the server fills in the rest and returns it on reads.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Field, Tag

from ._base import UNKNOWN_TAG, TypedModel, UnknownModel, WireModel, type_discriminator

__all__ = [
    "FunctionTool",
    "McpHttpTransport",
    "McpStdioTransport",
    "McpTool",
    "McpTransport",
    "ProgrammaticToolCallingTool",
    "TextConfig",
    "TextFormat",
    "Tool",
    "ToolSearchTool",
    "UnknownMcpTransport",
    "UnknownTool",
    "WebSearchLocation",
    "WebSearchTool",
]


class FunctionTool(TypedModel):
    """A function the application runs when the agent calls it.

    ``parameters`` is a JSON Schema whose root must be ``{"type": "object"}``. Set
    ``defer_loading`` to load the definition only when a ``tool_search`` finds it.
    """

    type: Literal["function"] = "function"
    name: str
    description: str
    parameters: dict[str, Any]
    defer_loading: bool = False


class ToolSearchTool(TypedModel):
    """Lets the agent discover functions declared with ``defer_loading=True``.

    It has no settings. Session reads leave it out of ``agent.tools``.
    """

    type: Literal["tool_search"] = "tool_search"


class WebSearchLocation(WireModel):
    """An approximate user location that biases web search results."""

    city: str | None = None
    country: str | None = None
    region: str | None = None
    timezone: str | None = None


class WebSearchTool(TypedModel):
    """Web search. Execution only admits ``mode="disabled"``; saved Agents keep any mode."""

    type: Literal["web_search"] = "web_search"
    mode: Literal["disabled", "cached", "live"] | str | None = None
    context_size: Literal["low", "medium", "high"] | str | None = None
    allowed_domains: list[str] | None = None
    location: WebSearchLocation | None = None


class ProgrammaticToolCallingTool(TypedModel):
    """Controls whether the model may call tools from generated code.

    Saved with ``enabled=True`` when omitted; execution only admits ``enabled=False``.
    """

    type: Literal["programmatic_tool_calling"] = "programmatic_tool_calling"
    enabled: bool = True


class McpHttpTransport(TypedModel):
    """An MCP server reached over HTTP(S). Non-empty ``headers`` are rejected."""

    type: Literal["http"] = "http"
    server_url: str
    headers: dict[str, str] | None = None


class McpStdioTransport(TypedModel):
    """An MCP server started as a local process. Core accepts only HTTP; reads may show it."""

    type: Literal["stdio"] = "stdio"
    command: str
    args: list[str] = Field(default_factory=list)
    cwd: str | None = None
    env_vars: list[str] = Field(default_factory=list)


class UnknownMcpTransport(UnknownModel):
    """An MCP transport of a type this SDK does not know; see :attr:`raw`."""


McpTransport: TypeAlias = Annotated[
    Annotated[McpHttpTransport, Tag("http")]
    | Annotated[McpStdioTransport, Tag("stdio")]
    | Annotated[UnknownMcpTransport, Tag(UNKNOWN_TAG)],
    type_discriminator(McpHttpTransport, McpStdioTransport),
]


class McpTool(TypedModel):
    """A remote MCP server whose tools the agent may call.

    ``allowed_tools=None`` permits every tool of the server; ``[]`` permits none.
    """

    type: Literal["mcp"] = "mcp"
    server_label: str
    transport: McpTransport
    connection_origin: Literal["service", "environment"] | str | None = None
    allowed_tools: list[str] | None = None
    credential_id: str | None = None
    request_metadata: dict[str, Any] | None = None
    required: bool = False


class UnknownTool(UnknownModel):
    """A tool of a type this SDK does not know (``computer_use``, ...); see :attr:`raw`."""


Tool: TypeAlias = Annotated[
    Annotated[FunctionTool, Tag("function")]
    | Annotated[ToolSearchTool, Tag("tool_search")]
    | Annotated[WebSearchTool, Tag("web_search")]
    | Annotated[ProgrammaticToolCallingTool, Tag("programmatic_tool_calling")]
    | Annotated[McpTool, Tag("mcp")]
    | Annotated[UnknownTool, Tag(UNKNOWN_TAG)],
    type_discriminator(
        FunctionTool, ToolSearchTool, WebSearchTool, ProgrammaticToolCallingTool, McpTool
    ),
]


class TextFormat(WireModel):
    """The output format: ordinary ``text``, or ``json_schema`` with a ``schema``.

    This is the Agents API form, not the Responses API one: it has no ``name`` or
    ``strict``. Build it with :meth:`text` or :meth:`json_schema`.
    """

    type: Literal["text", "json_schema"] | str = "text"
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")

    @classmethod
    def text(cls) -> TextFormat:
        """Plain text output (the default)."""
        return cls(type="text")

    @classmethod
    def json_schema(cls, schema: dict[str, Any]) -> TextFormat:
        """Constrain the final answer to ``schema``, whose root must be an object."""
        return cls(type="json_schema", schema_=schema)


class TextConfig(WireModel):
    """How the agent writes text: its output format and verbosity."""

    format: TextFormat = Field(default_factory=TextFormat.text)
    verbosity: Literal["low", "medium", "high"] | str = "medium"
