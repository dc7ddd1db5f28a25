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
from ._base import AsyncResource, CallOptions, SyncResource, body, path, split_call_options
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


class _SessionCreateCall(SessionCreateParams, CallOptions, total=False):
    """``sessions.create`` keywords: the Session's fields plus per-call options."""


class _SessionUpdateCall(SessionUpdateParams, CallOptions, total=False):
    """``sessions.update`` keywords: the fields to change plus per-call options."""


def _create(
    params: Mapping[str, Any], *, stream: bool, idempotency_key: str | None
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
        "POST",
        _ROOT,
        body=data,
        has_body=True,
        stream=stream,
        idempotency_key=idempotency_key,
        keyed=True,
    )


def _recovery(options: RequestOptions, key: str) -> RequestOptions:
    """The contract's recovery for a lost creation stream: the same request and key
    with ``stream: false``, which returns the committed Session."""
    return dataclasses.replace(
        options, body={**options.body, "stream": False}, stream=False, idempotency_key=key
    )


def _update(session_id: str, params: Mapping[str, Any]) -> RequestOptions:
    return RequestOptions(
        "POST", path(_ONE, session_id=session_id), body=body(params), has_body=True
    )


def _list_query(
    after: str | None, limit: int | None, order: Order | None, agent_id: str | None
) -> dict[str, Any]:
    return {**list_params(after=after, limit=limit, order=order), "agent_id": agent_id}


class Sessions(SyncResource):
    """``client.sessions``: Sessions, with ``events``, ``turns`` and ``items`` beneath."""

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
        **params: Unpack[_SessionCreateCall],
    ) -> Session: ...

    @overload
    def create(
        self,
        *,
        stream: Literal[True],
        idempotency_key: str | None = None,
        **params: Unpack[_SessionCreateCall],
    ) -> CreationEventStream: ...

    def create(
        self,
        *,
        stream: bool = False,
        idempotency_key: str | None = None,
        **params: Unpack[_SessionCreateCall],
    ) -> Session | CreationEventStream:
        """Create a Session; with ``stream=True``, follow its creation as events.

        A retry (automatic, or yours with the same ``idempotency_key``) returns the
        original Session and never admits its input twice; a stream that loses the
        Session recovers it into ``stream.session``.
        """
        fields, call = split_call_options(params)
        options = _create(fields, stream=stream, idempotency_key=idempotency_key)
        if stream:
            return CreationEventStream(
                self._send(options, call),
                lambda key: self._call(_recovery(options, key), Session.model_validate, call),
            )
        return self._call(options, Session.model_validate, call)

    def retrieve(self, session_id: str, **call: Unpack[CallOptions]) -> Session:
        """Read a Session: its status, pending required actions and configuration."""
        options = RequestOptions("GET", path(_ONE, session_id=session_id))
        return self._call(options, Session.model_validate, call)

    def update(self, session_id: str, **params: Unpack[_SessionUpdateCall]) -> Session:
        """Change the given fields of a Session."""
        fields, call = split_call_options(params)
        return self._call(_update(session_id, fields), Session.model_validate, call)

    def list(
        self,
        *,
        after: str | None = None,
        limit: int | None = None,
        order: Order | None = None,
        agent_id: str | None = None,
        **call: Unpack[CallOptions],
    ) -> SyncPage[Session]:
        """Sessions, newest first unless ``order`` says otherwise; iterate for all."""
        query = _list_query(after, limit, order, agent_id)
        return self._list(_ROOT, query, Session.model_validate, call)

    def delete(self, session_id: str, **call: Unpack[CallOptions]) -> SessionDeleted:
        """Delete an idle Session."""
        options = RequestOptions("DELETE", path(_ONE, session_id=session_id))
        return self._call(options, SessionDeleted.model_validate, call)


class AsyncSessions(AsyncResource):
    """The async twin of :class:`Sessions`."""

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
        **params: Unpack[_SessionCreateCall],
    ) -> Session: ...

    @overload
    async def create(
        self,
        *,
        stream: Literal[True],
        idempotency_key: str | None = None,
        **params: Unpack[_SessionCreateCall],
    ) -> AsyncCreationEventStream: ...

    async def create(
        self,
        *,
        stream: bool = False,
        idempotency_key: str | None = None,
        **params: Unpack[_SessionCreateCall],
    ) -> Session | AsyncCreationEventStream:
        """Create a Session; with ``stream=True``, follow its creation as events."""
        fields, call = split_call_options(params)
        options = _create(fields, stream=stream, idempotency_key=idempotency_key)
        if stream:
            return AsyncCreationEventStream(
                await self._send(options, call),
                lambda key: self._call(_recovery(options, key), Session.model_validate, call),
            )
        return await self._call(options, Session.model_validate, call)

    async def retrieve(self, session_id: str, **call: Unpack[CallOptions]) -> Session:
        """Read a Session: its status, pending required actions and configuration."""
        options = RequestOptions("GET", path(_ONE, session_id=session_id))
        return await self._call(options, Session.model_validate, call)

    async def update(self, session_id: str, **params: Unpack[_SessionUpdateCall]) -> Session:
        """Change the given fields of a Session."""
        fields, call = split_call_options(params)
        return await self._call(_update(session_id, fields), Session.model_validate, call)

    def list(
        self,
        *,
        after: str | None = None,
        limit: int | None = None,
        order: Order | None = None,
        agent_id: str | None = None,
        **call: Unpack[CallOptions],
    ) -> AsyncPageRequest[Session]:
        """Sessions, newest first unless ``order`` says otherwise; iterate for all."""
        query = _list_query(after, limit, order, agent_id)
        return self._list(_ROOT, query, Session.model_validate, call)

    async def delete(self, session_id: str, **call: Unpack[CallOptions]) -> SessionDeleted:
        """Delete an idle Session."""
        options = RequestOptions("DELETE", path(_ONE, session_id=session_id))
        return await self._call(options, SessionDeleted.model_validate, call)
