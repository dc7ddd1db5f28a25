"""Required actions: what a ``requires_action`` Session waits for from the application."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Tag, TypeAdapter

from ._base import UNKNOWN_TAG, TypedModel, UnknownModel, WireModel, type_discriminator

__all__ = [
    "ComputerUseApprovalRequestAction",
    "ComputerUseRequest",
    "EnvironmentConnectionAction",
    "FunctionCallAction",
    "McpApprovalRequest",
    "McpApprovalRequestAction",
    "RequiredAction",
    "UnknownRequiredAction",
    "parse_required_action",
]


def decode_arguments(arguments: Any) -> Any:
    """Function call arguments as a Python value.

    The server may send the model's arguments as a JSON object or as a JSON-encoded
    string; both decode to the same value here. Raises ``ValueError`` when a string is
    not valid JSON.
    """
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError as exc:
            raise ValueError(
                f"function call 'arguments' is a string but not valid JSON ({exc}); "
                "read the raw value from the 'arguments' field instead"
            ) from exc
    return arguments


class FunctionCallAction(TypedModel):
    """Run the function ``name`` and submit its result with the same ``turn_id`` and ``call_id``."""

    type: Literal["function_call"] = "function_call"
    turn_id: str
    call_id: str
    name: str
    arguments: Any = None
    """A JSON object or a JSON-encoded string; :meth:`decoded_arguments` handles both."""

    def decoded_arguments(self) -> Any:
        """The arguments as a Python value, whichever form the server sent."""
        return decode_arguments(self.arguments)


class EnvironmentConnectionAction(TypedModel):
    """Connect the ``self_hosted`` machine for ``environment_id``; input waits for it."""

    type: Literal["environment_connection"] = "environment_connection"
    environment_id: str


class McpApprovalRequest(WireModel):
    """What an MCP tool call that needs approval wants to do."""

    type: Literal["mcp_tool_call"] | str = "mcp_tool_call"
    server_label: str
    name: str | None = None
    arguments: Any = None
    message: str


class McpApprovalRequestAction(TypedModel):
    """Approve or deny an MCP tool call. In the official types; OpenAgentCore does not send it."""

    type: Literal["mcp_approval_request"] = "mcp_approval_request"
    turn_id: str
    request_id: str
    request: McpApprovalRequest


class ComputerUseRequest(WireModel):
    """What a computer-use approval asks for.

    Kept loose on purpose: ``browser_origin_access`` names an ``origin``, while
    ``browser_authentication`` carries form ``fields`` and ``options`` that this SDK
    has no use for; they stay readable as extras.
    """

    type: str
    origin: str | None = None
    reason: str | None = None


class ComputerUseApprovalRequestAction(TypedModel):
    """Answer a computer-use request. In the official types; OpenAgentCore does not send it."""

    type: Literal["computer_use_approval_request"] = "computer_use_approval_request"
    turn_id: str
    request_id: str
    request: ComputerUseRequest


class UnknownRequiredAction(UnknownModel):
    """A required action of a type this SDK does not know; see :attr:`raw`."""


RequiredAction: TypeAlias = Annotated[
    Annotated[FunctionCallAction, Tag("function_call")]
    | Annotated[EnvironmentConnectionAction, Tag("environment_connection")]
    | Annotated[McpApprovalRequestAction, Tag("mcp_approval_request")]
    | Annotated[ComputerUseApprovalRequestAction, Tag("computer_use_approval_request")]
    | Annotated[UnknownRequiredAction, Tag(UNKNOWN_TAG)],
    type_discriminator(
        FunctionCallAction,
        EnvironmentConnectionAction,
        McpApprovalRequestAction,
        ComputerUseApprovalRequestAction,
    ),
]

required_action_adapter: TypeAdapter[RequiredAction] = TypeAdapter(RequiredAction)


def parse_required_action(data: Mapping[str, Any]) -> RequiredAction:
    """Parse one entry of ``Session.required_actions``; unknown types give an unknown action."""
    return required_action_adapter.validate_python(data)
