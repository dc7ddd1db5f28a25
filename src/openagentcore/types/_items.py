"""Items: the durable history of a Session, one entry per message, call or result.

Items are what to read after a lost stream: the event stream is live only, Items are
kept. An Item can be read while still ``in_progress``; a cancelled or failed Turn leaves
its unfinished Items ``incomplete`` with their partial content.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Tag, TypeAdapter

from ._actions import decode_arguments
from ._base import UNKNOWN_TAG, TypedModel, UnknownModel, WireModel, type_discriminator
from ._content import Content, OutputText, SummaryText

__all__ = [
    "AgentMessageItem",
    "CallStatus",
    "CloseSubagentCallItem",
    "CommandExecutionItem",
    "CreateSubagentCallItem",
    "FunctionCallItem",
    "FunctionCallOutputItem",
    "InterruptSubagentCallItem",
    "Item",
    "ItemStatus",
    "McpCallItem",
    "MessageItem",
    "ReasoningItem",
    "ResumeSubagentCallItem",
    "SendSubagentInputCallItem",
    "UnknownItem",
    "WaitForSubagentsCallItem",
    "WebSearchAction",
    "WebSearchCallItem",
    "parse_item",
]

#: Status of messages, reasoning and web searches.
ItemStatus: TypeAlias = Literal["in_progress", "completed", "incomplete"]
#: Status of calls, which can also fail.
CallStatus: TypeAlias = Literal["in_progress", "completed", "failed", "incomplete"]


class _Item(TypedModel):
    # openai 3.51 lets a message omit `id`; the contract requires it on every Item.
    id: str
    turn_id: str


class MessageItem(_Item):
    """A user or assistant message.

    ``phase`` is the harness's phase for assistant text (``commentary`` or
    ``final_answer``) when it reports one, else ``None``.
    """

    type: Literal["message"] = "message"
    role: Literal["user", "assistant"] | str
    content: list[Content]
    #: The contract's message shape allows a null status; missing is treated the same.
    status: ItemStatus | str | None = None
    phase: Literal["commentary", "final_answer"] | str | None = None

    @property
    def output_text(self) -> str:
        """All assistant text parts joined, or ``""`` for a user message."""
        return "".join(part.text for part in self.content if isinstance(part, OutputText))


class ReasoningItem(_Item):
    """The model's reasoning summary. Its ``status`` may be absent or ``None``."""

    type: Literal["reasoning"] = "reasoning"
    summary: list[SummaryText]
    status: ItemStatus | str | None = None


class FunctionCallItem(_Item):
    """The agent called an application function.

    This Item alone does not prove the call is still pending; ``Session.required_actions``
    does.
    """

    type: Literal["function_call"] = "function_call"
    call_id: str
    name: str
    arguments: Any = None
    status: CallStatus | str

    def decoded_arguments(self) -> Any:
        """The arguments as a Python value, whether sent as an object or a JSON string."""
        return decode_arguments(self.arguments)


class FunctionCallOutputItem(_Item):
    """A function result the harness applied.

    The server always sends both ``output`` and ``error``, ``None`` for the one the
    submission left out.
    """

    type: Literal["function_call_output"] = "function_call_output"
    call_id: str
    output: str | list[Content] | None = None
    error: str | None = None
    status: CallStatus | str


class AgentMessageItem(_Item):
    """A message between agents in a multi-agent Session. It has no status."""

    type: Literal["agent_message"] = "agent_message"
    sender_agent_id: str
    recipient_agent_id: str
    content: list[Content]


class McpCallItem(_Item):
    """A call to an MCP server tool, with the server's result or error as it reported them."""

    type: Literal["mcp_call"] = "mcp_call"
    server_label: str
    name: str
    arguments: Any = None
    output: Any = None
    error: Any = None
    status: CallStatus | str


class WebSearchAction(WireModel):
    """What a web search did: ``search``, ``open_page``, ``find_in_page`` or ``other``."""

    type: Literal["search", "open_page", "find_in_page", "other"] | str
    query: str | None = None
    queries: list[str] | None = None
    url: str | None = None
    pattern: str | None = None


class WebSearchCallItem(_Item):
    """A web search the model ran."""

    type: Literal["web_search_call"] = "web_search_call"
    action: WebSearchAction | None = None
    status: ItemStatus | str


class CommandExecutionItem(_Item):
    """A shell command the harness ran.

    ``output`` is what the harness reported, subject to its quotas and text conversion.
    """

    type: Literal["command_execution"] = "command_execution"
    command: str
    cwd: str | None = None
    output: str | None = None
    exit_code: int | None = None
    duration_ms: int | None = None
    status: CallStatus | str


class CreateSubagentCallItem(_Item):
    """The model started a Subagent."""

    type: Literal["create_subagent_call"] = "create_subagent_call"
    agent_id: str
    content: list[Content]
    model: str | None = None
    reasoning_effort: str | None = None
    status: CallStatus | str


class _SubagentCallItem(_Item):
    sender_agent_id: str
    recipient_agent_id: str
    status: CallStatus | str


class SendSubagentInputCallItem(_SubagentCallItem):
    """The model sent input to a Subagent."""

    type: Literal["send_subagent_input_call"] = "send_subagent_input_call"
    content: list[Content]


class ResumeSubagentCallItem(_SubagentCallItem):
    """The model resumed a Subagent."""

    type: Literal["resume_subagent_call"] = "resume_subagent_call"


class InterruptSubagentCallItem(_SubagentCallItem):
    """The model interrupted a Subagent."""

    type: Literal["interrupt_subagent_call"] = "interrupt_subagent_call"


class CloseSubagentCallItem(_SubagentCallItem):
    """The model closed a Subagent."""

    type: Literal["close_subagent_call"] = "close_subagent_call"


class WaitForSubagentsCallItem(_Item):
    """The model waited for Subagents to finish."""

    type: Literal["wait_for_subagents_call"] = "wait_for_subagents_call"
    sender_agent_id: str
    recipient_agent_ids: list[str]
    status: CallStatus | str


class UnknownItem(UnknownModel):
    """An Item of a type this SDK does not know; see :attr:`raw`."""

    id: str | None = None
    turn_id: str | None = None


# The contract pins these fourteen types. openai 3.51 adds computer-use Items that
# OpenAgentCore never sends; the contract wins and they parse as UnknownItem.
Item: TypeAlias = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[AgentMessageItem, Tag("agent_message")]
    | Annotated[McpCallItem, Tag("mcp_call")]
    | Annotated[WebSearchCallItem, Tag("web_search_call")]
    | Annotated[CommandExecutionItem, Tag("command_execution")]
    | Annotated[CreateSubagentCallItem, Tag("create_subagent_call")]
    | Annotated[SendSubagentInputCallItem, Tag("send_subagent_input_call")]
    | Annotated[ResumeSubagentCallItem, Tag("resume_subagent_call")]
    | Annotated[WaitForSubagentsCallItem, Tag("wait_for_subagents_call")]
    | Annotated[InterruptSubagentCallItem, Tag("interrupt_subagent_call")]
    | Annotated[CloseSubagentCallItem, Tag("close_subagent_call")]
    | Annotated[UnknownItem, Tag(UNKNOWN_TAG)],
    type_discriminator(
        MessageItem,
        ReasoningItem,
        FunctionCallItem,
        FunctionCallOutputItem,
        AgentMessageItem,
        McpCallItem,
        WebSearchCallItem,
        CommandExecutionItem,
        CreateSubagentCallItem,
        SendSubagentInputCallItem,
        ResumeSubagentCallItem,
        WaitForSubagentsCallItem,
        InterruptSubagentCallItem,
        CloseSubagentCallItem,
    ),
]

item_adapter: TypeAdapter[Item] = TypeAdapter(Item)


def parse_item(data: Mapping[str, Any]) -> Item:
    """Parse one Item; an unknown ``type`` gives an :class:`UnknownItem`."""
    return item_adapter.validate_python(data)
