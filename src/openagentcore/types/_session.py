"""Sessions: a running conversation with an Agent, and the Environment it runs in."""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeAlias

from pydantic import Field

from ._actions import FunctionCallAction, RequiredAction
from ._agent import AgentsCoreExtension, SessionAgent
from ._base import WireModel
from ._usage import TokenUsage

__all__ = [
    "EnvironmentNetwork",
    "EnvironmentPackages",
    "Session",
    "SessionDeleted",
    "SessionEnvironment",
    "SessionStatus",
]

SessionStatus: TypeAlias = Literal["idle", "in_progress", "requires_action", "failed"]


class EnvironmentNetwork(WireModel):
    """Network access of a Session's Environment, and the domains it may reach."""

    access: Literal["enabled", "disabled", "restricted"] | str
    allowed_domains: list[str] = Field(default_factory=list)


class EnvironmentPackages(WireModel):
    """Packages to install in a Session's Environment, by ecosystem."""

    npm: list[str] = Field(default_factory=list)
    python: list[str] = Field(default_factory=list)
    system: list[str] = Field(default_factory=list)


class SessionEnvironment(WireModel):
    """Where the Session runs: ``none``, ``openai_hosted`` or ``self_hosted``.

    One flat shape for every kind, as the contract defines it; fields that do not apply
    to a kind are ``None``. On ``self_hosted``, ``remote_url`` is the URL the Runtime
    daemon connects to.
    """

    # The contract requires only `type`; openai 3.51 also requires id, remote_url,
    # workspace_directory and capability_directories on self_hosted. The contract wins.

    type: Literal["none", "openai_hosted", "self_hosted"] | str
    id: str | None = None
    remote_url: str | None = None
    workspace_directory: str | None = None
    capability_directories: list[str] | None = None
    network: EnvironmentNetwork | None = None
    packages: EnvironmentPackages | None = None
    files: list[dict[str, Any]] | None = None
    plugins: list[dict[str, Any]] | None = None
    skills: list[dict[str, Any]] | None = None


class Session(WireModel):
    """A Session as reads, lists and Session events return it."""

    object: Literal["agent.session"] = "agent.session"
    _always_sent: ClassVar[frozenset[str]] = frozenset({"object"})
    id: str
    status: SessionStatus | str
    required_actions: list[RequiredAction] = Field(default_factory=list)
    """What the Session waits for; non-empty only while ``status`` is ``requires_action``."""
    agent: SessionAgent
    environment: SessionEnvironment
    metadata: dict[str, str] = Field(default_factory=dict)
    vault_ids: list[str] = Field(default_factory=list)
    error: str | None = None
    """Why the Session failed, when ``status`` is ``failed``."""
    usage: TokenUsage | None = None
    """Sum of root Turn usage once every Turn ended with known usage, else ``None``."""
    created_at: int
    last_active_at: int
    x_agents_core: AgentsCoreExtension | None = None

    @property
    def pending_function_calls(self) -> list[FunctionCallAction]:
        """The function calls the Session waits for, in the server's order."""
        return [a for a in self.required_actions if isinstance(a, FunctionCallAction)]


class SessionDeleted(WireModel):
    """The answer to deleting a Session."""

    object: Literal["agent.session.deleted"] = "agent.session.deleted"
    _always_sent: ClassVar[frozenset[str]] = frozenset({"object"})
    id: str
    deleted: bool
