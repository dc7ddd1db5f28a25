"""Agents: saved configuration, and the snapshot of it that a Session runs."""

from __future__ import annotations

from typing import ClassVar, Literal, TypeAlias

from pydantic import Field

from ._base import WireModel
from ._tools import TextConfig, Tool

__all__ = [
    "Agent",
    "AgentDeleted",
    "AgentsCoreExtension",
    "MultiAgentConfig",
    "ReasoningConfig",
    "ServiceTier",
    "SessionAgent",
]

ServiceTier: TypeAlias = Literal["auto", "default", "flex", "priority", "fast", "ultrafast"]


class MultiAgentConfig(WireModel):
    """Whether the agent may start Subagents, and how many at once."""

    enabled: bool
    max_concurrent_subagents: int | None = None


class ReasoningConfig(WireModel):
    """Requested reasoning options; ``None`` means unset (Core fills in no model default)."""

    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | str | None = None
    summary: Literal["concise", "detailed", "auto"] | str | None = None


class AgentsCoreExtension(WireModel):
    """OpenAgentCore's own settings (``x_agents_core``); other members are kept as extras."""

    harness: Literal["codex", "claude_sdk", "mcode"] | str | None = None


class _AgentConfig(WireModel):
    """Fields shared by a saved Agent and a Session's frozen copy of one."""

    model: str
    name: str | None = None
    instructions: str | None = None
    multi_agent: MultiAgentConfig
    reasoning: ReasoningConfig
    service_tier: ServiceTier | str
    text: TextConfig
    tools: list[Tool]
    x_agents_core: AgentsCoreExtension | None = None


class Agent(_AgentConfig):
    """A saved, reusable Agent. Sessions copy it when they start."""

    object: Literal["agent"] = "agent"
    _always_sent: ClassVar[frozenset[str]] = frozenset({"object"})
    id: str
    created_at: int
    updated_at: int
    metadata: dict[str, str] = Field(default_factory=dict)


class SessionAgent(_AgentConfig):
    """The Agent configuration frozen into a Session when it was created.

    Its ``tools`` never list ``tool_search``, which the Session shape does not include.
    """

    id: str


class AgentDeleted(WireModel):
    object: Literal["agent.deleted"] = "agent.deleted"
    _always_sent: ClassVar[frozenset[str]] = frozenset({"object"})
    id: str
    deleted: bool
