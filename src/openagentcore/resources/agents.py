"""``client.agents``: saved, reusable Agent configurations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from typing_extensions import Required, TypedDict, Unpack

from .._admission import check_text, check_tools
from .._base_client import RequestOptions
from .._pagination import AsyncPageRequest, Order, SyncPage, list_params
from ..types import Agent, AgentDeleted, Tool
from ._base import AsyncResource, SyncResource, body, path, post

__all__ = ["AgentCreateParams", "AgentUpdateParams", "Agents", "AsyncAgents"]

_ROOT = "agents"
_ONE = "agents/{agent_id}"


class _AgentFields(TypedDict, total=False):
    name: str | None
    instructions: str | None
    tools: Sequence[Tool | Mapping[str, Any]] | None
    text: Mapping[str, Any] | None
    reasoning: Mapping[str, Any] | None
    metadata: Mapping[str, str] | None
    multi_agent: Mapping[str, Any] | None
    service_tier: str | None
    compaction: Mapping[str, Any] | None
    experimental: Mapping[str, Any]


class AgentUpdateParams(_AgentFields, total=False):
    """Fields to change; omitted ones keep their saved value, an explicit ``None``
    clears where the API allows it."""

    model: str


class AgentCreateParams(_AgentFields, total=False):
    """Fields of a new Agent; omitted ones take the server's defaults."""

    model: Required[str]


def _checked(params: Mapping[str, Any]) -> dict[str, Any]:
    """Dump params and run the saved-Agent admission rules before anything is sent."""
    data = body(params)
    if data.get("tools") is not None:
        check_tools(data["tools"], for_session=False)
    if data.get("text") is not None:
        check_text(data["text"], for_session=False)
    return data


def _create(params: AgentCreateParams) -> RequestOptions:
    return post(_ROOT, _checked(params))


def _update(agent_id: str, params: AgentUpdateParams) -> RequestOptions:
    return post(path(_ONE, agent_id=agent_id), _checked(params))


def _list_query(after: str | None, limit: int | None, order: Order | None) -> dict[str, Any]:
    return list_params(after=after, limit=limit, order=order)


class Agents(SyncResource):
    def create(self, **params: Unpack[AgentCreateParams]) -> Agent:
        """Save an Agent. Tool declarations are checked locally first."""
        return self._call(_create(params), Agent.model_validate)

    def retrieve(self, agent_id: str) -> Agent:
        return self._call(
            RequestOptions("GET", path(_ONE, agent_id=agent_id)), Agent.model_validate
        )

    def update(self, agent_id: str, **params: Unpack[AgentUpdateParams]) -> Agent:
        return self._call(_update(agent_id, params), Agent.model_validate)

    def list(
        self, *, after: str | None = None, limit: int | None = None, order: Order | None = None
    ) -> SyncPage[Agent]:
        return self._list(_ROOT, _list_query(after, limit, order), Agent.model_validate)

    def delete(self, agent_id: str) -> AgentDeleted:
        options = RequestOptions("DELETE", path(_ONE, agent_id=agent_id))
        return self._call(options, AgentDeleted.model_validate)


class AsyncAgents(AsyncResource):
    async def create(self, **params: Unpack[AgentCreateParams]) -> Agent:
        """Save an Agent. Tool declarations are checked locally first."""
        return await self._call(_create(params), Agent.model_validate)

    async def retrieve(self, agent_id: str) -> Agent:
        options = RequestOptions("GET", path(_ONE, agent_id=agent_id))
        return await self._call(options, Agent.model_validate)

    async def update(self, agent_id: str, **params: Unpack[AgentUpdateParams]) -> Agent:
        return await self._call(_update(agent_id, params), Agent.model_validate)

    def list(
        self, *, after: str | None = None, limit: int | None = None, order: Order | None = None
    ) -> AsyncPageRequest[Agent]:
        return self._list(_ROOT, _list_query(after, limit, order), Agent.model_validate)

    async def delete(self, agent_id: str) -> AgentDeleted:
        options = RequestOptions("DELETE", path(_ONE, agent_id=agent_id))
        return await self._call(options, AgentDeleted.model_validate)
