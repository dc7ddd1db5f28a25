"""Input events: what a caller POSTs to ``/v1/agents/sessions/{id}/events``.

Send them with :meth:`~openagentcore.types.WireModel.to_wire`, which keeps field
presence: for a function result, an omitted ``output`` or ``error`` is stored
differently from an explicit ``null`` and is part of the result's retry identity.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeAlias

from pydantic import Field, TypeAdapter

from ._base import TypedModel, WireModel
from ._content import InputContent, InputText

__all__ = [
    "InputCancelEvent",
    "InputEvent",
    "InputMessageEvent",
    "ToolResultEvent",
    "UserMessage",
    "parse_input_event",
]


class UserMessage(WireModel):
    """A user message: a non-empty list of text and image parts.

    ``type`` is optional on the wire and only written when given.
    """

    role: Literal["user"] = "user"
    content: list[InputContent]
    type: Literal["message"] = "message"
    _always_sent: ClassVar[frozenset[str]] = frozenset({"role"})

    @classmethod
    def from_text(cls, text: str) -> UserMessage:
        """A user message holding ``text`` as its only part."""
        return cls(role="user", content=[InputText(text=text)])


class InputMessageEvent(TypedModel):
    """Add user messages: starts a Turn on an idle Session, or steers the running one."""

    type: Literal["agent.session.input.message"] = "agent.session.input.message"
    input: list[UserMessage]

    @classmethod
    def from_text(cls, text: str) -> InputMessageEvent:
        """One user message holding ``text``."""
        return cls(input=[UserMessage.from_text(text)])


class InputCancelEvent(TypedModel):
    """Ask to cancel the running Turn; it has stopped once the Turn reads ``cancelled``."""

    type: Literal["agent.session.input.cancel"] = "agent.session.input.cancel"


class ToolResultEvent(TypedModel):
    """The result of a function call, matched to it by ``turn_id`` and ``call_id``.

    ``output`` and ``error`` are optional and nullable. Leave a field out by not passing
    it; pass ``None`` to send an explicit ``null``. :meth:`to_wire` keeps the
    difference, and so does a round trip through :meth:`from_wire`.
    """

    type: Literal["agent.session.input.tool_result"] = "agent.session.input.tool_result"
    turn_id: str
    call_id: str
    success: bool
    output: str | list[InputContent] | None = None
    error: str | None = None

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> ToolResultEvent:
        """Rebuild an event from its JSON form, remembering which fields were present."""
        return cls.model_validate(data)


#: Any event a caller may send. Unknown types are rejected: the server rejects them too.
InputEvent: TypeAlias = Annotated[
    InputMessageEvent | InputCancelEvent | ToolResultEvent, Field(discriminator="type")
]

input_event_adapter: TypeAdapter[InputEvent] = TypeAdapter(InputEvent)


def parse_input_event(data: Mapping[str, Any]) -> InputEvent:
    """Parse one submitted input event; raises ``pydantic.ValidationError`` if malformed."""
    return input_event_adapter.validate_python(data)
