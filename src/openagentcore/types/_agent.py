"""Agents: saved configuration, and the snapshot of it that a Session runs."""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeAlias

from pydantic import Field

from ._base import WireModel
from ._tools import TextConfig, Tool

__all__ = [
    "Agent",
    "AgentDeleted",
    "AgentsCoreExtension",
    "ModelProvider",
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


class ModelProvider(WireModel):
    """The model access a harness uses: a native ``protocol``, ``base_url`` and key.

    ``api_key`` is write-only: reads return ``api_key_configured`` instead. It is left
    out of ``repr()`` so it cannot leak into logs.
    """

    protocol: Literal["anthropic", "responses"] | str | None = None
    base_url: str | None = None
    api_key: str | None = Field(default=None, repr=False)
    api_key_configured: bool | None = None
    context_window: int | None = None
    max_output_tokens: int | None = None


class AgentsCoreExtension(WireModel):
    """OpenAgentCore's additions to the official shapes, sent and read as ``x_agents_core``.

    ``harness`` and ``harness_config`` belong on Agents; ``environment`` and the
    read-only ``installation`` on Sessions; ``model_provider`` on both.
    """

    harness: Literal["codex", "claude_sdk", "mcode"] | str | None = None
    model_provider: ModelProvider | None = None
    harness_config: dict[str, Any] | None = None
    environment: dict[str, Any] | None = None
    installation: dict[str, Any] | None = Field(default=None, repr=False)
    """Short-lived install commands for a ``self_hosted`` machine; kept out of ``repr()``."""


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
    """The answer to deleting an Agent."""

    object: Literal["agent.deleted"] = "agent.deleted"
    _always_sent: ClassVar[frozenset[str]] = frozenset({"object"})
    id: str
    deleted: bool
