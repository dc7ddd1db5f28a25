"""Turns: one run of the agent, started by input and ended by completion, failure or cancel."""

from __future__ import annotations

from typing import ClassVar, Literal, TypeAlias

from ._base import WireModel
from ._usage import TokenUsage

__all__ = ["Turn", "TurnError", "TurnErrorCode", "TurnStatus"]

TurnStatus: TypeAlias = Literal[
    "queued", "in_progress", "waiting", "completed", "failed", "cancelled"
]

#: Failure categories the contract lists; the official types list a few more.
TurnErrorCode: TypeAlias = Literal[
    "context_length_exceeded",
    "session_budget_exceeded",
    "usage_limit_exceeded",
    "rate_limit_exceeded",
    "server_overloaded",
    "cyber_policy",
    "connection_failed",
    "server_error",
    "authentication_error",
    "invalid_request",
    "resource_not_found",
    "sandbox_error",
    "executor_version_incompatible",
    "active_turn_not_steerable",
    "request_timeout",
    "internal_error",
]


class TurnError(WireModel):
    """Why a Turn failed; a safe summary, never raw engine output."""

    code: TurnErrorCode | str
    message: str


class Turn(WireModel):
    """A Turn as the Turns routes and Turn events return it."""

    object: Literal["agent.session.turn"] = "agent.session.turn"
    _always_sent: ClassVar[frozenset[str]] = frozenset({"object"})
    id: str
    session_id: str
    agent_id: str
    status: TurnStatus | str
    created_at: int
    started_at: int | None = None
    completed_at: int | None = None
    error: TurnError | None = None
    subagent_id: str | None = None
    usage: TokenUsage | None = None
    """The latest usage snapshot, or ``None`` while unknown (not zero)."""

    @property
    def is_terminal(self) -> bool:
        """Whether the Turn has ended and will not change status again."""
        return self.status in ("completed", "failed", "cancelled")
