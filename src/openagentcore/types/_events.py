"""Session events: what ``GET /v1/agents/sessions/{id}/events`` streams.

The stream is live only and never replays what a client missed; after a disconnect,
subscribe again and read the Session, Turns and Items to catch up. Every event class has
a ``TYPE`` constant with its wire ``type``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeAlias

from pydantic import Tag, TypeAdapter

from ._base import UNKNOWN_TAG, TypedModel, UnknownModel, WireModel, type_discriminator
from ._content import Content, OutputText, SummaryText
from ._items import Item
from ._session import Session
from ._turn import Turn
from ._usage import TokenUsage

__all__ = [
    "CommandExecutionOutputDeltaEvent",
    "ContentPartAddedEvent",
    "ContentPartDoneEvent",
    "EnvironmentConnectedEvent",
    "EnvironmentDisconnectedEvent",
    "EnvironmentEvent",
    "EnvironmentExpiredEvent",
    "EnvironmentFailedEvent",
    "EnvironmentPendingEvent",
    "EnvironmentReadyEvent",
    "EnvironmentResetEvent",
    "EnvironmentState",
    "EnvironmentSuspendedEvent",
    "ErrorEvent",
    "EventError",
    "ItemAddedEvent",
    "ItemDoneEvent",
    "OutputTextDeltaEvent",
    "OutputTextDoneEvent",
    "ReasoningSummaryPartAddedEvent",
    "ReasoningSummaryPartDoneEvent",
    "ReasoningSummaryTextDeltaEvent",
    "ReasoningSummaryTextDoneEvent",
    "SessionCreatedEvent",
    "SessionEvent",
    "SessionFailedEvent",
    "SessionIdleEvent",
    "SessionInProgressEvent",
    "SessionRequiresActionEvent",
    "SessionSnapshotEvent",
    "Subagent",
    "SubagentActiveEvent",
    "SubagentClosedEvent",
    "SubagentCreatedEvent",
    "SubagentEvent",
    "TerminalTurnEvent",
    "TurnCancelledEvent",
    "TurnCompletedEvent",
    "TurnCreatedEvent",
    "TurnEvent",
    "TurnFailedEvent",
    "TurnInProgressEvent",
    "UnknownEvent",
    "parse_event",
]


class _Event(TypedModel):
    event_id: str


class EventError(WireModel):
    """An error carried inside an event.

    Core's own ``stream_interrupted`` error and Environment state errors have no
    ``param``; errors shaped like the official ones carry ``param: null``.
    """

    type: str
    code: str | None = None
    message: str
    param: str | None = None


# Session status events carry the whole Session as it was at that transition.


class SessionSnapshotEvent(_Event):
    """Base of the events that carry a Session snapshot."""

    session: Session


class SessionCreatedEvent(SessionSnapshotEvent):
    """First event of a streamed creation, with the same Session as the JSON 201 body."""

    type: Literal["agent.session.created"] = "agent.session.created"


class SessionInProgressEvent(SessionSnapshotEvent):
    """The Session started working on a Turn."""

    type: Literal["agent.session.in_progress"] = "agent.session.in_progress"


class SessionRequiresActionEvent(SessionSnapshotEvent):
    """The Session waits for the application: see ``session.required_actions``."""

    type: Literal["agent.session.requires_action"] = "agent.session.requires_action"


class SessionIdleEvent(SessionSnapshotEvent):
    """The Session finished its work and waits for input."""

    type: Literal["agent.session.idle"] = "agent.session.idle"


class SessionFailedEvent(SessionSnapshotEvent):
    """The Session failed; ``session.error`` says why."""

    type: Literal["agent.session.failed"] = "agent.session.failed"


# Turn lifecycle events.


class TurnEvent(_Event):
    """Base of the events about one Turn.

    The contract guarantees only ``session_id`` and ``turn_id``; ``turn`` is the
    Turn's snapshot when the server includes one, else ``None`` (read the Turn then).
    """

    session_id: str
    turn_id: str
    turn: Turn | None = None


class TurnCreatedEvent(TurnEvent):
    """A Turn was created from new input."""

    type: Literal["agent.session.turn.created"] = "agent.session.turn.created"


class TurnInProgressEvent(TurnEvent):
    """A Turn started running."""

    type: Literal["agent.session.turn.in_progress"] = "agent.session.turn.in_progress"


class TerminalTurnEvent(TurnEvent):
    """Base of the events that end a Turn.

    Only these carry a top-level ``usage``, copied from the Turn at that moment and
    ``None`` when unknown; a later Turn read may still fill it in.
    """

    usage: TokenUsage | None = None

    @property
    def status(self) -> str:
        """The Turn's final status: from the snapshot, else from the event type."""
        if self.turn is not None:
            return self.turn.status
        return self.TYPE.rsplit(".", 1)[-1]


class TurnCompletedEvent(TerminalTurnEvent):
    """A Turn ended normally."""

    type: Literal["agent.session.turn.completed"] = "agent.session.turn.completed"


class TurnFailedEvent(TerminalTurnEvent):
    """A Turn ended with an error."""

    type: Literal["agent.session.turn.failed"] = "agent.session.turn.failed"


class TurnCancelledEvent(TerminalTurnEvent):
    """A Turn was cancelled before it ended."""

    type: Literal["agent.session.turn.cancelled"] = "agent.session.turn.cancelled"


# Item and streamed-output events.


class ItemAddedEvent(_Event):
    """An Item appeared. ``output_index`` is ``None`` for input Items (messages, results)."""

    type: Literal["agent.session.turn.item.added"] = "agent.session.turn.item.added"
    session_id: str
    turn_id: str | None = None
    output_index: int | None = None
    item: Item


class ItemDoneEvent(_Event):
    """An agent output Item is final; it replaces whatever the deltas built up."""

    type: Literal["agent.session.turn.item.done"] = "agent.session.turn.item.done"
    session_id: str
    turn_id: str | None = None
    output_index: int
    item: Item


class _OutputEvent(_Event):
    session_id: str
    turn_id: str | None = None
    item_id: str
    output_index: int


class ContentPartAddedEvent(_OutputEvent):
    """A new content part of an output message started."""

    type: Literal["agent.session.turn.content_part.added"] = "agent.session.turn.content_part.added"
    content_index: int
    part: OutputText


class ContentPartDoneEvent(_OutputEvent):
    """A content part of an output message is complete."""

    type: Literal["agent.session.turn.content_part.done"] = "agent.session.turn.content_part.done"
    content_index: int
    part: OutputText


class OutputTextDeltaEvent(_OutputEvent):
    """A piece of output text; append ``delta`` to the part's text."""

    type: Literal["agent.session.turn.output_text.delta"] = "agent.session.turn.output_text.delta"
    content_index: int
    delta: str


class OutputTextDoneEvent(_OutputEvent):
    """The complete text of a part; it replaces the accumulated deltas."""

    type: Literal["agent.session.turn.output_text.done"] = "agent.session.turn.output_text.done"
    content_index: int
    text: str


class ReasoningSummaryPartAddedEvent(_OutputEvent):
    """A new part of a reasoning summary started."""

    type: Literal["agent.session.turn.reasoning_summary_part.added"] = (
        "agent.session.turn.reasoning_summary_part.added"
    )
    summary_index: int
    part: SummaryText


class ReasoningSummaryPartDoneEvent(_OutputEvent):
    """A part of a reasoning summary is complete."""

    type: Literal["agent.session.turn.reasoning_summary_part.done"] = (
        "agent.session.turn.reasoning_summary_part.done"
    )
    summary_index: int
    part: SummaryText
    status: Literal["incomplete"] | str | None = None


class ReasoningSummaryTextDeltaEvent(_OutputEvent):
    """A piece of reasoning summary text."""

    type: Literal["agent.session.turn.reasoning_summary_text.delta"] = (
        "agent.session.turn.reasoning_summary_text.delta"
    )
    summary_index: int
    delta: str


class ReasoningSummaryTextDoneEvent(_OutputEvent):
    """The complete text of a reasoning summary part."""

    type: Literal["agent.session.turn.reasoning_summary_text.done"] = (
        "agent.session.turn.reasoning_summary_text.done"
    )
    summary_index: int
    text: str


class CommandExecutionOutputDeltaEvent(_OutputEvent):
    """Command output as it streams; not a byte-exact capture, the final Item is."""

    type: Literal["agent.output.command_execution_output.delta"] = (
        "agent.output.command_execution_output.delta"
    )
    delta: str


# Environment events.


class EnvironmentState(WireModel):
    """A snapshot of a Session's Environment, as environment events carry it."""

    id: str
    type: str
    status: (
        Literal["pending", "ready", "connected", "disconnected", "suspended", "expired", "failed"]
        | str
    )
    error: EventError | None = None


class EnvironmentEvent(_Event):
    """Base of the events that report an Environment state change."""

    session_id: str
    turn_id: str | None = None
    environment: EnvironmentState


class EnvironmentPendingEvent(EnvironmentEvent):
    """The Environment is being prepared."""

    type: Literal["agent.session.environment.pending"] = "agent.session.environment.pending"


class EnvironmentReadyEvent(EnvironmentEvent):
    """The Environment is ready to use."""

    type: Literal["agent.session.environment.ready"] = "agent.session.environment.ready"


class EnvironmentConnectedEvent(EnvironmentEvent):
    """The Environment is connected to the Session."""

    type: Literal["agent.session.environment.connected"] = "agent.session.environment.connected"


class EnvironmentDisconnectedEvent(EnvironmentEvent):
    """The Environment lost its connection to the Session."""

    type: Literal["agent.session.environment.disconnected"] = (
        "agent.session.environment.disconnected"
    )


class EnvironmentSuspendedEvent(EnvironmentEvent):
    """The Environment was suspended."""

    type: Literal["agent.session.environment.suspended"] = "agent.session.environment.suspended"


class EnvironmentExpiredEvent(EnvironmentEvent):
    """The Environment expired and can no longer be used."""

    type: Literal["agent.session.environment.expired"] = "agent.session.environment.expired"


class EnvironmentFailedEvent(EnvironmentEvent):
    """The Environment failed to initialize; ``environment.error`` says why."""

    type: Literal["agent.session.environment.failed"] = "agent.session.environment.failed"


class EnvironmentResetEvent(_Event):
    """The Environment was reset; ``reset_count`` counts the resets."""

    type: Literal["agent.session.environment.reset"] = "agent.session.environment.reset"
    session_id: str
    turn_id: str | None = None
    environment_id: str
    reset_count: int


# Subagent events.


class Subagent(WireModel):
    """A child agent started by the Session's agent."""

    object: Literal["agent.session.subagent"] = "agent.session.subagent"
    _always_sent: ClassVar[frozenset[str]] = frozenset({"object"})
    id: str
    session_id: str
    parent_agent_id: str
    status: Literal["active", "closed"] | str
    name: str | None = None
    instructions: list[Content] | None = None
    opened_at: int
    closed_at: int | None = None


class SubagentEvent(_Event):
    """Base of the events that report a Subagent's lifecycle."""

    subagent: Subagent


class SubagentCreatedEvent(SubagentEvent):
    """A Subagent was created."""

    type: Literal["agent.session.subagent.created"] = "agent.session.subagent.created"


class SubagentActiveEvent(SubagentEvent):
    """A Subagent is working."""

    type: Literal["agent.session.subagent.active"] = "agent.session.subagent.active"


class SubagentClosedEvent(SubagentEvent):
    """A Subagent was closed."""

    type: Literal["agent.session.subagent.closed"] = "agent.session.subagent.closed"


class ErrorEvent(_Event):
    """An error on the stream, e.g. code ``stream_interrupted``; the stream closes after it.

    Reconnect, then read the Session, Turns and Items: nothing missed is replayed.
    """

    type: Literal["error"] = "error"
    # Optional although openai 3.51 requires it: the contract requires only `event_id`
    # and `type` on every event, and Core's own `stream_interrupted` is its own shape.
    session_id: str | None = None
    error: EventError


class UnknownEvent(UnknownModel):
    """An event of a type this SDK does not know; see :attr:`raw`."""

    event_id: str | None = None


SessionEvent: TypeAlias = Annotated[
    Annotated[SessionCreatedEvent, Tag("agent.session.created")]
    | Annotated[SessionInProgressEvent, Tag("agent.session.in_progress")]
    | Annotated[SessionRequiresActionEvent, Tag("agent.session.requires_action")]
    | Annotated[SessionIdleEvent, Tag("agent.session.idle")]
    | Annotated[SessionFailedEvent, Tag("agent.session.failed")]
    | Annotated[TurnCreatedEvent, Tag("agent.session.turn.created")]
    | Annotated[TurnInProgressEvent, Tag("agent.session.turn.in_progress")]
    | Annotated[TurnCompletedEvent, Tag("agent.session.turn.completed")]
    | Annotated[TurnFailedEvent, Tag("agent.session.turn.failed")]
    | Annotated[TurnCancelledEvent, Tag("agent.session.turn.cancelled")]
    | Annotated[ItemAddedEvent, Tag("agent.session.turn.item.added")]
    | Annotated[ItemDoneEvent, Tag("agent.session.turn.item.done")]
    | Annotated[ContentPartAddedEvent, Tag("agent.session.turn.content_part.added")]
    | Annotated[ContentPartDoneEvent, Tag("agent.session.turn.content_part.done")]
    | Annotated[OutputTextDeltaEvent, Tag("agent.session.turn.output_text.delta")]
    | Annotated[OutputTextDoneEvent, Tag("agent.session.turn.output_text.done")]
    | Annotated[
        ReasoningSummaryPartAddedEvent, Tag("agent.session.turn.reasoning_summary_part.added")
    ]
    | Annotated[
        ReasoningSummaryPartDoneEvent, Tag("agent.session.turn.reasoning_summary_part.done")
    ]
    | Annotated[
        ReasoningSummaryTextDeltaEvent, Tag("agent.session.turn.reasoning_summary_text.delta")
    ]
    | Annotated[
        ReasoningSummaryTextDoneEvent, Tag("agent.session.turn.reasoning_summary_text.done")
    ]
    | Annotated[
        CommandExecutionOutputDeltaEvent, Tag("agent.output.command_execution_output.delta")
    ]
    | Annotated[EnvironmentPendingEvent, Tag("agent.session.environment.pending")]
    | Annotated[EnvironmentReadyEvent, Tag("agent.session.environment.ready")]
    | Annotated[EnvironmentConnectedEvent, Tag("agent.session.environment.connected")]
    | Annotated[EnvironmentDisconnectedEvent, Tag("agent.session.environment.disconnected")]
    | Annotated[EnvironmentSuspendedEvent, Tag("agent.session.environment.suspended")]
    | Annotated[EnvironmentExpiredEvent, Tag("agent.session.environment.expired")]
    | Annotated[EnvironmentFailedEvent, Tag("agent.session.environment.failed")]
    | Annotated[EnvironmentResetEvent, Tag("agent.session.environment.reset")]
    | Annotated[SubagentCreatedEvent, Tag("agent.session.subagent.created")]
    | Annotated[SubagentActiveEvent, Tag("agent.session.subagent.active")]
    | Annotated[SubagentClosedEvent, Tag("agent.session.subagent.closed")]
    | Annotated[ErrorEvent, Tag("error")]
    | Annotated[UnknownEvent, Tag(UNKNOWN_TAG)],
    type_discriminator(
        SessionCreatedEvent,
        SessionInProgressEvent,
        SessionRequiresActionEvent,
        SessionIdleEvent,
        SessionFailedEvent,
        TurnCreatedEvent,
        TurnInProgressEvent,
        TurnCompletedEvent,
        TurnFailedEvent,
        TurnCancelledEvent,
        ItemAddedEvent,
        ItemDoneEvent,
        ContentPartAddedEvent,
        ContentPartDoneEvent,
        OutputTextDeltaEvent,
        OutputTextDoneEvent,
        ReasoningSummaryPartAddedEvent,
        ReasoningSummaryPartDoneEvent,
        ReasoningSummaryTextDeltaEvent,
        ReasoningSummaryTextDoneEvent,
        CommandExecutionOutputDeltaEvent,
        EnvironmentPendingEvent,
        EnvironmentReadyEvent,
        EnvironmentConnectedEvent,
        EnvironmentDisconnectedEvent,
        EnvironmentSuspendedEvent,
        EnvironmentExpiredEvent,
        EnvironmentFailedEvent,
        EnvironmentResetEvent,
        SubagentCreatedEvent,
        SubagentActiveEvent,
        SubagentClosedEvent,
        ErrorEvent,
    ),
]

event_adapter: TypeAdapter[SessionEvent] = TypeAdapter(SessionEvent)


def parse_event(data: Mapping[str, Any]) -> SessionEvent:
    """Parse one decoded event; an unknown ``type`` gives an :class:`UnknownEvent`."""
    return event_adapter.validate_python(data)
