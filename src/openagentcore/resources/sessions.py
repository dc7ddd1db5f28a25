"""``client.sessions``: Sessions, with ``events``, ``turns`` and ``items`` beneath."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal, overload

from typing_extensions import TypedDict, Unpack

from .._admission import check_session_config
from .._base_client import AsyncTransport, RequestOptions, SyncTransport
from .._pagination import AsyncPageRequest, Order, SyncPage, list_params
from .._streaming import AsyncCreationEventStream, CreationEventStream
from ..types import Session, SessionDeleted, UserMessage
from ._base import AsyncResource, SyncResource, body, path
from .events import AsyncEvents, Events
from .items import AsyncItems, Items
from .turns import AsyncTurns, Turns

__all__ = ["AsyncSessions", "SessionCreateParams", "SessionUpdateParams", "Sessions"]

_ROOT = "agents/sessions"
_ONE = "agents/sessions/{session_id}"
#: The placement without an execution environment: the right default for function
#: calling, where the application runs the tools.
DEFAULT_ENVIRONMENT: Mapping[str, Any] = {"type": "none"}


class SessionUpdateParams(TypedDict):
    """An update replaces only ``metadata``, which is required: null or ``{}`` clears it
    (openapi ``v1.UpdateSessionRequest``)."""

    metadata: Mapping[str, str] | None


class SessionCreateParams(TypedDict, total=False):
    """Session creation fields of openapi ``v1.CreateSessionRequest``; ``environment``
    defaults to ``{"type": "none"}``. The server rejects any other member."""

    environment: Mapping[str, Any]
    agent: Mapping[str, Any]
    agent_id: str
    input: str | Sequence[UserMessage | Mapping[str, Any]] | None
    metadata: Mapping[str, str] | None
    vault_ids: Sequence[str]
    #: OpenAgentCore's Session extension: ``model_provider`` and ``sandbox_node_id``.
    x_agents_core: Mapping[str, Any]


def _create(
    params: SessionCreateParams, *, stream: bool, idempotency_key: str | None
) -> RequestOptions:
    data = body({"environment": DEFAULT_ENVIRONMENT, **params})
    agent = data.get("agent")
    if isinstance(agent, Mapping):
        # Inline configuration is checked with the Session rules; an agent_id's saved
        # tools are resolved by the server, which runs the same checks.
        check_session_config(tools=agent.get("tools"), text=agent.get("text"))
    if stream:
        data["stream"] = True
    return RequestOptions(
        "POST", _ROOT, body=data, has_body=True, stream=stream, idempotency_key=idempotency_key
    )


def _recovery(options: RequestOptions, key: str) -> RequestOptions:
    """The contract's recovery for a lost creation stream: the same request and key
    with ``stream: false``, which returns the committed Session."""
    return dataclasses.replace(
        options, body={**options.body, "stream": False}, stream=False, idempotency_key=key
    )


def _update(session_id: str, params: SessionUpdateParams) -> RequestOptions:
    return RequestOptions(
        "POST", path(_ONE, session_id=session_id), body=body(params), has_body=True
    )


def _list_query(
    after: str | None, limit: int | None, order: Order | None, agent_id: str | None
) -> dict[str, Any]:
    return {**list_params(after=after, limit=limit, order=order), "agent_id": agent_id}


class Sessions(SyncResource):
    def __init__(self, transport: SyncTransport) -> None:
        super().__init__(transport)
        self.events = Events(transport)
        self.turns = Turns(transport)
        self.items = Items(transport)

    @overload
    def create(
        self,
        *,
        stream: Literal[False] = False,
        idempotency_key: str | None = None,
        **params: Unpack[SessionCreateParams],
    ) -> Session: ...

    @overload
    def create(
        self,
        *,
        stream: Literal[True],
        idempotency_key: str | None = None,
        **params: Unpack[SessionCreateParams],
    ) -> CreationEventStream: ...

    def create(
        self,
        *,
        stream: bool = False,
        idempotency_key: str | None = None,
        **params: Unpack[SessionCreateParams],
    ) -> Session | CreationEventStream:
        """Create a Session; with ``stream=True``, follow its creation as events.

        A retry (automatic, or yours with the same ``idempotency_key``) returns the
        original Session and never admits its input twice; a stream that loses the
        Session recovers it into ``stream.session``.
        """
        options = _create(params, stream=stream, idempotency_key=idempotency_key)
        if stream:
            return CreationEventStream(
                self._transport.send(options),
                lambda key: self._call(_recovery(options, key), Session.model_validate),
            )
        return self._call(options, Session.model_validate)

    def retrieve(self, session_id: str) -> Session:
        options = RequestOptions("GET", path(_ONE, session_id=session_id))
        return self._call(options, Session.model_validate)

    def update(self, session_id: str, **params: Unpack[SessionUpdateParams]) -> Session:
        return self._call(_update(session_id, params), Session.model_validate)

    def list(
        self,
        *,
        after: str | None = None,
        limit: int | None = None,
        order: Order | None = None,
        agent_id: str | None = None,
    ) -> SyncPage[Session]:
        query = _list_query(after, limit, order, agent_id)
        return self._list(_ROOT, query, Session.model_validate)

    def delete(self, session_id: str) -> SessionDeleted:
        options = RequestOptions("DELETE", path(_ONE, session_id=session_id))
        return self._call(options, SessionDeleted.model_validate)


class AsyncSessions(AsyncResource):
    def __init__(self, transport: AsyncTransport) -> None:
        super().__init__(transport)
        self.events = AsyncEvents(transport)
        self.turns = AsyncTurns(transport)
        self.items = AsyncItems(transport)

    @overload
    async def create(
        self,
        *,
        stream: Literal[False] = False,
        idempotency_key: str | None = None,
        **params: Unpack[SessionCreateParams],
    ) -> Session: ...

    @overload
    async def create(
        self,
        *,
        stream: Literal[True],
        idempotency_key: str | None = None,
        **params: Unpack[SessionCreateParams],
    ) -> AsyncCreationEventStream: ...

    async def create(
        self,
        *,
        stream: bool = False,
        idempotency_key: str | None = None,
        **params: Unpack[SessionCreateParams],
    ) -> Session | AsyncCreationEventStream:
        """Create a Session; with ``stream=True``, follow its creation as events."""
        options = _create(params, stream=stream, idempotency_key=idempotency_key)
        if stream:
            return AsyncCreationEventStream(
                await self._transport.send(options),
                lambda key: self._call(_recovery(options, key), Session.model_validate),
            )
        return await self._call(options, Session.model_validate)

    async def retrieve(self, session_id: str) -> Session:
        options = RequestOptions("GET", path(_ONE, session_id=session_id))
        return await self._call(options, Session.model_validate)

    async def update(self, session_id: str, **params: Unpack[SessionUpdateParams]) -> Session:
        return await self._call(_update(session_id, params), Session.model_validate)

    def list(
        self,
        *,
        after: str | None = None,
        limit: int | None = None,
        order: Order | None = None,
        agent_id: str | None = None,
    ) -> AsyncPageRequest[Session]:
        query = _list_query(after, limit, order, agent_id)
        return self._list(_ROOT, query, Session.model_validate)

    async def delete(self, session_id: str) -> SessionDeleted:
        options = RequestOptions("DELETE", path(_ONE, session_id=session_id))
        return await self._call(options, SessionDeleted.model_validate)
