"""``client.agents``: saved, reusable Agent configurations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from typing_extensions import Required, TypedDict, Unpack

from .._admission import check_text, check_tools
from .._base_client import RequestOptions
from .._pagination import AsyncPageRequest, Order, SyncPage, list_params
from ..types import Agent, AgentDeleted, Tool
from ._base import (
    AsyncResource,
    CallOptions,
    SyncResource,
    body,
    path,
    post,
    split_call_options,
)

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


class _AgentCreateCall(AgentCreateParams, CallOptions, total=False):
    """``agents.create`` keywords: the Agent's fields plus per-call options."""


class _AgentUpdateCall(AgentUpdateParams, CallOptions, total=False):
    """``agents.update`` keywords: the fields to change plus per-call options."""


def _create(params: Mapping[str, Any]) -> RequestOptions:
    return post(_ROOT, _checked(params))


def _update(agent_id: str, params: Mapping[str, Any]) -> RequestOptions:
    return post(path(_ONE, agent_id=agent_id), _checked(params))


def _retrieve(agent_id: str) -> RequestOptions:
    return RequestOptions("GET", path(_ONE, agent_id=agent_id))


def _delete(agent_id: str) -> RequestOptions:
    return RequestOptions("DELETE", path(_ONE, agent_id=agent_id))


def _list_query(after: str | None, limit: int | None, order: Order | None) -> dict[str, Any]:
    return list_params(after=after, limit=limit, order=order)


class Agents(SyncResource):
    """``client.agents``: create, read, change, list and delete saved Agents."""

    def create(self, **params: Unpack[_AgentCreateCall]) -> Agent:
        """Save an Agent. Tool declarations are checked locally first.

        Not retried once the server may have admitted it: the route takes no
        idempotency key, so a retry after a lost answer could save a second Agent.
        """
        fields, call = split_call_options(params)
        return self._call(_create(fields), Agent.model_validate, call)

    def retrieve(self, agent_id: str, **call: Unpack[CallOptions]) -> Agent:
        """Read one saved Agent."""
        return self._call(_retrieve(agent_id), Agent.model_validate, call)

    def update(self, agent_id: str, **params: Unpack[_AgentUpdateCall]) -> Agent:
        """Change the given fields of a saved Agent; existing Sessions keep their copy."""
        fields, call = split_call_options(params)
        return self._call(_update(agent_id, fields), Agent.model_validate, call)

    def list(
        self,
        *,
        after: str | None = None,
        limit: int | None = None,
        order: Order | None = None,
        **call: Unpack[CallOptions],
    ) -> SyncPage[Agent]:
        """One page of saved Agents; iterating it walks every following page."""
        return self._list(_ROOT, _list_query(after, limit, order), Agent.model_validate, call)

    def delete(self, agent_id: str, **call: Unpack[CallOptions]) -> AgentDeleted:
        """Delete a saved Agent."""
        return self._call(_delete(agent_id), AgentDeleted.model_validate, call)


class AsyncAgents(AsyncResource):
    """The async twin of :class:`Agents`."""

    async def create(self, **params: Unpack[_AgentCreateCall]) -> Agent:
        """Save an Agent (see :meth:`Agents.create`)."""
        fields, call = split_call_options(params)
        return await self._call(_create(fields), Agent.model_validate, call)

    async def retrieve(self, agent_id: str, **call: Unpack[CallOptions]) -> Agent:
        """Read one saved Agent."""
        return await self._call(_retrieve(agent_id), Agent.model_validate, call)

    async def update(self, agent_id: str, **params: Unpack[_AgentUpdateCall]) -> Agent:
        """Change the given fields of a saved Agent; existing Sessions keep their copy."""
        fields, call = split_call_options(params)
        return await self._call(_update(agent_id, fields), Agent.model_validate, call)

    def list(
        self,
        *,
        after: str | None = None,
        limit: int | None = None,
        order: Order | None = None,
        **call: Unpack[CallOptions],
    ) -> AsyncPageRequest[Agent]:
        """Saved Agents: ``await`` for the first page, ``async for`` for all of them."""
        return self._list(_ROOT, _list_query(after, limit, order), Agent.model_validate, call)

    async def delete(self, agent_id: str, **call: Unpack[CallOptions]) -> AgentDeleted:
        """Delete a saved Agent."""
        return await self._call(_delete(agent_id), AgentDeleted.model_validate, call)
