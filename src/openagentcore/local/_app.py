"""Starlette routes for the Agents API subset the SDK uses.

Each route runs the wire checks in the server's order (``OpenAI-Beta``, then the bearer
key, then the body gate, then validation) before calling the engine, and every response
carries a fresh ``X-Request-Id``.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .._admission import (
    check_message_content,
    check_session_config,
    check_text,
    check_tool_result_content,
    check_tools,
)
from .._errors import AdmissionError
from ._engine import ApiError, Engine, Published, Subscriber, invalid, not_found, sse_frame
from ._requests import (
    ListQuery,
    canonical_json,
    creation_messages,
    idempotency_key,
    input_events,
    json_body,
    kind_of,
    parse_metadata,
    reject_unknown,
)
from ._store import AgentRecord, SessionRecord, new_id, now

__all__ = ["create_app"]

_BETA_MESSAGE = "To access the Agents API, set the 'OpenAI-Beta' header to 'agents=v1'."
_AUTH_MESSAGE = "A valid Agents API bearer key is required."
_JSON_BODY_LIMIT = 1024 * 1024
_SESSION_CREATE_BODY_LIMIT = 16 * 1024 * 1024
_DEFAULT_MODEL = "local-scripted"
_AGENT_FIELDS = (
    "model",
    "name",
    "instructions",
    "metadata",
    "tools",
    "text",
    "reasoning",
    "service_tier",
    "multi_agent",
    "x_agents_core",
)
_SESSION_FIELDS = (
    "agent",
    "agent_id",
    "environment",
    "input",
    "metadata",
    "stream",
    "vault_ids",
    "x_agents_core",
)

_LOCATION_FIELDS = ("city", "country", "region", "timezone")

Handler = Callable[[Request], Awaitable[Response]]


class _App:
    """Holds what the handlers share: the engine, the key and the fault counters."""

    def __init__(self, engine: Engine, api_key: str, keepalive_interval: float) -> None:
        self.engine = engine
        self.api_key = api_key
        self.keepalive_interval = keepalive_interval
        self.input_posts = 0

    # -- plumbing --------------------------------------------------------------------

    def endpoint(self, handler: Handler, *, streams: bool = False) -> Handler:
        async def run(request: Request) -> Response:
            started = time.monotonic()
            try:
                if streams and request.method == "HEAD":
                    raise _method_not_allowed("GET,POST")
                self._check_headers(request)
                response = await handler(request)
            except ApiError as error:
                response = JSONResponse(
                    error.envelope(), status_code=error.status, headers=error.headers
                )
            _stamp(response, started)
            return response

        return run

    def _check_headers(self, request: Request) -> None:
        beta = request.headers.getlist("openai-beta")
        if len(beta) != 1 or beta[0].strip() != "agents=v1":
            raise ApiError(400, "invalid_beta", _BETA_MESSAGE, type="invalid_beta")
        authorization = request.headers.getlist("authorization")
        scheme, _, key = (
            authorization[0].partition(" ") if len(authorization) == 1 else ("", "", "")
        )
        presented = key.strip().encode("utf-8", "surrogateescape")
        if scheme.lower() != "bearer" or not secrets.compare_digest(
            presented, self.api_key.encode()
        ):
            raise ApiError(
                401,
                None,
                _AUTH_MESSAGE,
                type="invalid_request_error",
                headers={"WWW-Authenticate": "Bearer"},
            )

    # -- agents ------------------------------------------------------------------------

    async def create_agent(self, request: Request) -> Response:
        body = await json_body(request, _JSON_BODY_LIMIT)
        reject_unknown(body, _AGENT_FIELDS)
        if "model" not in body:
            raise invalid(
                "Missing required parameter: 'model'.", param="model", code="invalid_request_error"
            )
        _check_agent(body)
        config = _agent_config({}, body)
        timestamp = now()
        agent = self.engine.store.add(AgentRecord(new_id("agent"), timestamp, timestamp, config))
        self.engine.store.commit()
        return _json(_agent_wire(agent), 201)

    async def list_agents(self, request: Request) -> Response:
        query = ListQuery(request, strict_limit=False)
        agents = sorted(
            (a for a in self.engine.store.agents.values() if not a.deleted),
            key=lambda a: (a.created_at, a.id),
        )
        return _json(query.page(agents, lambda a: a.id, _agent_wire, cursor_error=not_found()))

    async def retrieve_agent(self, request: Request) -> Response:
        return _json(_agent_wire(self._agent(request.path_params["agent_id"])))

    async def update_agent(self, request: Request) -> Response:
        body = await json_body(request, _JSON_BODY_LIMIT)
        reject_unknown(body, _AGENT_FIELDS)
        _check_agent(body)
        agent = self._agent(request.path_params["agent_id"])
        agent.config = _agent_config(agent.config, body)
        agent.updated_at = now()
        self.engine.store.save(agent)
        self.engine.store.commit()
        return _json(_agent_wire(agent))

    async def delete_agent(self, request: Request) -> Response:
        agent = self._agent(request.path_params["agent_id"])
        agent.deleted = True
        self.engine.store.save(agent)
        self.engine.store.commit()
        return _json({"id": agent.id, "object": "agent.deleted", "deleted": True})

    def _agent(self, agent_id: str) -> AgentRecord:
        agent = self.engine.store.agents.get(agent_id)
        if agent is None or agent.deleted:
            raise not_found()
        return agent

    # -- sessions ----------------------------------------------------------------------

    async def create_session(self, request: Request) -> Response:
        body = await json_body(request, _SESSION_CREATE_BODY_LIMIT)
        reject_unknown(body, _SESSION_FIELDS)
        # The inline Agent is validated first, before the input requirement, the retry
        # lookup and the saved Agent's lookup (wire-semantics.md, Configuration validation).
        inline = _inline_agent(body)
        key = idempotency_key(request)
        environment = body.get("environment")
        if not isinstance(environment, dict):
            raise invalid(
                "Missing required parameter: 'environment'.",
                param="environment",
                code="invalid_request_error",
            )
        if environment.get("type") != "none":
            raise invalid(
                "The local emulator runs only Sessions with environment type 'none'.",
                param="environment.type",
                code="unsupported_or_invalid_configuration",
            )
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise invalid(
                "Invalid type for 'stream': expected a boolean.",
                param="stream",
                code="invalid_request_error",
            )
        raw_input = body.get("input")
        if raw_input is None:
            message = (
                "streaming session creation requires initial input"
                if stream
                else "conversation-only sessions currently require initial input"
            )
            raise invalid(message, param="input", code="invalid_request_error")
        messages = creation_messages(raw_input)
        metadata = parse_metadata(body.get("metadata"))
        vault_ids = body.get("vault_ids") or []
        if not isinstance(vault_ids, list) or not all(isinstance(v, str) for v in vault_ids):
            raise invalid(
                "vault_ids must be a list of strings.",
                param="vault_ids",
                code="invalid_request_error",
            )

        store = self.engine.store
        # The response mode is not part of the retry identity: the contract's recovery
        # for a lost creation stream repeats the request with the same key and
        # ``stream: false`` (sessions-events.md, Creation streaming).
        fingerprint = canonical_json({k: v for k, v in body.items() if k != "stream"})
        if key is not None and key in store.creation_keys:
            previous_fingerprint, session_id = store.creation_keys[key]
            original = store.sessions.get(session_id)
            if previous_fingerprint != fingerprint or original is None or original.deleted:
                raise ApiError(
                    409,
                    "idempotency_conflict",
                    "This idempotency key was used with different input.",
                )
            if stream:
                return StreamingResponse(
                    _single(": connected\n\n"), 201, media_type="text/event-stream"
                )
            return _json(self.engine.session_wire(original), 201)

        agent = self._session_agent(body, inline)
        harness = agent.pop("harness")
        _check_content(messages, harness, where="input")
        session, subscriber = self.engine.create_session(
            agent=_public_session_agent(agent),
            environment={"type": "none"},
            metadata=metadata,
            vault_ids=list(vault_ids),
            messages=messages,
            stream=stream,
            harness=harness,
        )
        if key is not None:
            store.add_creation_key(key, fingerprint, session.id)
            store.commit()
        if subscriber is not None:
            return self._sse(request, subscriber, 201)
        return _json(self.engine.session_wire(session), 201)

    def _session_agent(self, body: dict[str, Any], inline: dict[str, Any]) -> dict[str, Any]:
        """Resolve ``agent_id`` and the inline ``agent`` into the frozen configuration."""
        if "agent_id" in body:
            agent_id = body["agent_id"]
            if not isinstance(agent_id, str):
                raise invalid(
                    "Invalid type for 'agent_id': expected a string, "
                    f"but got {kind_of(agent_id)} instead.",
                    param="agent_id",
                    code="invalid_request_error",
                )
            saved = self._agent(agent_id)
            harness = _admit_session(inline, saved.config)
            return {**_agent_config(saved.config, inline), "id": saved.id, "harness": harness}
        harness = _admit_session(inline, {})
        config = _agent_config({"model": _DEFAULT_MODEL}, inline)
        return {**config, "id": new_id("agent"), "harness": harness}

    async def list_sessions(self, request: Request) -> Response:
        query = ListQuery(request, strict_limit=False)
        agent_filter = request.query_params.get("agent_id")
        store = self.engine.store
        index = (
            store.session_order
            if agent_filter is None
            else store.session_order_by_agent.get(agent_filter, [])
        )

        def shown(entry: tuple[int, str]) -> SessionRecord | None:
            session = store.sessions[entry[1]]
            return None if session.deleted else session

        def position(session_id: str) -> int | None:
            session = store.sessions.get(session_id)
            if session is None or shown((session.created_at, session.id)) is None:
                return None
            at = bisect.bisect_left(index, (session.created_at, session.id))
            return at if at < len(index) and index[at][1] == session_id else None

        return _json(
            query.page_indexed(
                index, shown, position, self.engine.session_wire, cursor_error=not_found()
            )
        )

    async def retrieve_session(self, request: Request) -> Response:
        return _json(
            self.engine.session_wire(self.engine.session(request.path_params["session_id"]))
        )

    async def update_session(self, request: Request) -> Response:
        body = await json_body(request, _JSON_BODY_LIMIT)
        session = self.engine.session(request.path_params["session_id"])
        if not body:
            raise invalid("At least one update field is required", code="invalid_request_error")
        reject_unknown(body, ("metadata",))
        session.metadata = parse_metadata(body["metadata"])
        self.engine.store.save(session)
        self.engine.store.commit()
        return _json(self.engine.session_wire(session))

    async def delete_session(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        self.engine.delete_session(session_id)
        return _json({"id": session_id, "object": "agent.session.deleted", "deleted": True})

    # -- events ------------------------------------------------------------------------

    async def post_events(self, request: Request) -> Response:
        body = await json_body(request, _JSON_BODY_LIMIT)
        key = idempotency_key(request)
        events = input_events(body)
        session = self.engine.session(request.path_params["session_id"])
        _check_events_content(events, session.harness)
        self.input_posts += 1
        faults = self.engine.faults
        if faults.reject_input_every and self.input_posts % faults.reject_input_every == 0:
            raise self._unavailable()
        self.engine.submit_input(request.path_params["session_id"], events, key)
        if (
            faults.lose_input_response_every
            and self.input_posts % faults.lose_input_response_every == 0
        ):
            raise self._unavailable()
        return Response(status_code=202)

    def _unavailable(self) -> ApiError:
        # The server sends no Retry-After on a 503 (error-codes.md); the fault adds one
        # only when asked to.
        retry_after = self.engine.faults.retry_after
        return ApiError(
            503,
            "execution_unavailable",
            "Execution is temporarily unavailable. Retry with the same Idempotency-Key.",
            headers={} if retry_after is None else {"Retry-After": str(retry_after)},
        )

    async def stream_events(self, request: Request) -> Response:
        # Last-Event-ID is ignored on purpose: the stream is live only and never replays.
        session = self.engine.session(request.path_params["session_id"])
        return self._sse(request, self.engine.subscribe(session.id), 200)

    def _sse(self, request: Request, subscriber: Subscriber, status: int) -> Response:
        response = _EventStreamResponse(
            self._event_stream(subscriber),
            status_code=status,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )
        response.server_send = request.scope.get(_SERVER_SEND)
        return response

    async def _event_stream(self, subscriber: Subscriber) -> AsyncIterator[str]:
        sent = 0
        loop = asyncio.get_running_loop()
        # A keepalive goes out every interval, busy or idle (sessions-events.md).
        next_keepalive = loop.time() + self.keepalive_interval
        try:
            yield ": connected\n\n"
            while True:
                wait = next_keepalive - loop.time()
                if wait <= 0:
                    next_keepalive = loop.time() + self.keepalive_interval
                    yield ": keepalive\n\n"
                    continue
                try:
                    published = await subscriber.next(wait)
                except asyncio.TimeoutError:
                    continue
                # Events already published go out in one write: a burst costs one system
                # call, and a client that vanished mid-burst is written to once, not once
                # per event (asyncio logs a warning from the fifth write to a lost socket).
                frames: list[str] = []
                while True:
                    sent, ends = self._frame(subscriber, published, sent, frames)
                    if ends or not subscriber.has_queued():
                        break
                    published = await subscriber.next(self.keepalive_interval)
                if frames:
                    yield "".join(frames)
                if ends:
                    return
                stall = self.engine.faults.stall_stream_after
                if stall is not None and sent >= stall:
                    # Open, counted and silent until the client leaves.
                    self.engine.stalled_streams += 1
                    try:
                        await asyncio.Event().wait()
                    finally:
                        self.engine.stalled_streams -= 1
        finally:
            self.engine.unsubscribe(subscriber)

    def _frame(
        self, subscriber: Subscriber, published: Published | None, sent: int, frames: list[str]
    ) -> tuple[int, bool]:
        """Append an event's SSE frames (faults applied); returns the count of events
        sent so far and whether the stream ends after them."""
        faults = self.engine.faults
        if published is None:
            if subscriber.overflowed:
                frames.append(sse_frame(_interrupted(subscriber.session_id)))
            return sent, True
        frames.append(published.frame)
        sent += 1
        if faults.duplicate_every and sent % faults.duplicate_every == 0:
            frames.append(published.frame)
        if faults.close_stream_after and sent >= faults.close_stream_after:
            return sent, True
        ends = subscriber.until_idle and published.event["type"] in (
            "agent.session.idle",
            "agent.session.failed",
        )
        return sent, ends

    # -- turns and items -----------------------------------------------------------------

    async def list_turns(self, request: Request) -> Response:
        query = ListQuery(request, strict_limit=True)
        session = self.engine.session(request.path_params["session_id"])
        # Root Turns page by creation time, then ID (sessions-events.md, Turns and Items).
        turns = sorted(
            (self.engine.store.turns[turn_id] for turn_id in session.turn_ids),
            key=lambda turn: (turn.created_at, turn.id),
        )
        return _json(
            query.page(turns, lambda t: t.id, lambda t: t.to_wire(), cursor_error=not_found())
        )

    async def retrieve_turn(self, request: Request) -> Response:
        session = self.engine.session(request.path_params["session_id"])
        turn_id = request.path_params["turn_id"]
        if turn_id not in session.turn_ids:
            raise not_found()
        return _json(self.engine.store.turns[turn_id].to_wire())

    async def list_items(self, request: Request) -> Response:
        query = ListQuery(request, strict_limit=False)
        session = self.engine.session(request.path_params["session_id"])
        turn_id = request.path_params.get("turn_id")
        if turn_id is not None and turn_id not in session.turn_ids:
            raise not_found()
        items = sorted(
            (
                item
                for item in self.engine.store.items.values()
                if item.session_id == session.id and (turn_id is None or item.turn_id == turn_id)
            ),
            key=lambda item: item.seq,
        )
        cursor_error = invalid("Invalid session item ID in `after`", code="invalid_request_error")
        return _json(query.page(items, lambda i: i.id, lambda i: i.body, cursor_error=cursor_error))

    async def unknown_route(self, request: Request) -> Response:
        raise _unknown_route()


def create_app(engine: Engine, *, api_key: str, keepalive_interval: float = 15.0) -> Starlette:
    """Build the ASGI app; the engine binds to the server loop at startup."""
    app = _App(engine, api_key, keepalive_interval)
    ep = app.endpoint
    routes = [
        Route("/v1/agents/sessions", ep(app.create_session), methods=["POST"]),
        Route("/v1/agents/sessions", ep(app.list_sessions), methods=["GET"]),
        Route("/v1/agents/sessions/{session_id}", ep(app.retrieve_session), methods=["GET"]),
        Route("/v1/agents/sessions/{session_id}", ep(app.update_session), methods=["POST"]),
        Route("/v1/agents/sessions/{session_id}", ep(app.delete_session), methods=["DELETE"]),
        Route("/v1/agents/sessions/{session_id}/events", ep(app.post_events), methods=["POST"]),
        Route(
            "/v1/agents/sessions/{session_id}/events",
            ep(app.stream_events, streams=True),
            methods=["GET"],
        ),
        Route("/v1/agents/sessions/{session_id}/turns", ep(app.list_turns), methods=["GET"]),
        Route(
            "/v1/agents/sessions/{session_id}/turns/{turn_id}",
            ep(app.retrieve_turn),
            methods=["GET"],
        ),
        Route(
            "/v1/agents/sessions/{session_id}/turns/{turn_id}/items",
            ep(app.list_items),
            methods=["GET"],
        ),
        Route("/v1/agents/sessions/{session_id}/items", ep(app.list_items), methods=["GET"]),
        Route("/v1/agents", ep(app.create_agent), methods=["POST"]),
        Route("/v1/agents", ep(app.list_agents), methods=["GET"]),
        Route("/v1/agents/{agent_id}", ep(app.retrieve_agent), methods=["GET"]),
        Route("/v1/agents/{agent_id}", ep(app.update_agent), methods=["POST"]),
        Route("/v1/agents/{agent_id}", ep(app.delete_agent), methods=["DELETE"]),
        Route("/v1/{path:path}", ep(app.unknown_route), methods=["GET", "HEAD", "POST", "DELETE"]),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        engine.attach(asyncio.get_running_loop())
        yield

    async def method_not_allowed(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        allowed = status == 405
        error = _method_not_allowed("GET,HEAD,POST,DELETE") if allowed else _unknown_route()
        response = JSONResponse(error.envelope(), status_code=error.status, headers=error.headers)
        _stamp(response, time.monotonic())
        return response

    return _ServerSendStarlette(
        routes=routes, lifespan=lifespan, exception_handlers={HTTPException: method_not_allowed}
    )


# -- request helpers ----------------------------------------------------------------------


def _stamp(response: Response, started: float) -> None:
    response.headers["X-Request-Id"] = "req_" + secrets.token_hex(16)
    response.headers["OpenAI-Version"] = "2020-10-01"
    response.headers["OpenAI-Processing-Ms"] = str(int((time.monotonic() - started) * 1000))
    response.headers["X-Content-Type-Options"] = "nosniff"
    if response.media_type == "application/json":
        response.headers["Cache-Control"] = "no-store"


def _unknown_route() -> ApiError:
    # The type follows the code, not the status: only the code not_found_error gets
    # type not_found_error (error-codes.md, Which "code" is meant).
    return ApiError(
        404,
        "unsupported_operation",
        "This API route does not exist.",
        type="invalid_request_error",
    )


def _method_not_allowed(allow: str) -> ApiError:
    return ApiError(
        405,
        "unsupported_operation",
        "This API method is not supported.",
        type="invalid_request_error",
        headers={"Allow": allow},
    )


def _json(body: object, status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status)


async def _single(chunk: str) -> AsyncIterator[str]:
    yield chunk


class _EventStreamResponse(StreamingResponse):
    """An event stream whose connection is closed when one write blocks for
    :data:`STREAM_WRITE_TIMEOUT` seconds (sessions-events.md, Live event stream)."""

    #: The server's own ``send``, which can drop the connection (see _abort_connection).
    server_send: Send | None = None

    async def stream_response(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        try:
            async for chunk in self.body_iterator:
                body = chunk.encode() if isinstance(chunk, str) else bytes(chunk)
                message = {"type": "http.response.body", "body": body, "more_body": True}
                try:
                    await asyncio.wait_for(send(message), STREAM_WRITE_TIMEOUT)
                except asyncio.TimeoutError:
                    _abort_connection(self.server_send)
                    return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if isinstance(self.body_iterator, AsyncGenerator):
                await self.body_iterator.aclose()


#: Seconds one blocked socket write may take before the stream is closed.
STREAM_WRITE_TIMEOUT = 5.0


def _abort_connection(server_send: Send | None) -> None:
    """Drop the connection at once: a plain close would wait for the unread bytes to
    drain, which a reader that stopped reading never lets happen. uvicorn's ``send`` is
    a method of its request cycle, which holds the transport."""
    transport = getattr(getattr(server_send, "__self__", None), "transport", None)
    if not isinstance(transport, asyncio.WriteTransport):
        raise RuntimeError("cannot reach the connection of a blocked event stream")
    transport.abort()


#: Scope key of the server's ``send``, before any middleware wraps it.
_SERVER_SEND = "openagentcore.server_send"


class _ServerSendStarlette(Starlette):
    """Starlette that keeps the server's ``send`` in the scope for event streams."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[_SERVER_SEND] = send
        await super().__call__(scope, receive, send)


def _interrupted(session_id: str) -> dict[str, Any]:
    # Core's own stream_interrupted event has no param (sessions-events.md).
    return {
        "event_id": new_id("event"),
        "type": "error",
        "session_id": session_id,
        "error": {
            "type": "server_error",
            "code": "stream_interrupted",
            "message": (
                "The stream fell too far behind and was closed. Reconnect, then read the Session."
            ),
        },
    }


# -- agent configuration ------------------------------------------------------------------


def _agent_config(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Apply supplied fields over ``base`` with the saved defaults (wire-semantics.md)."""
    config = dict(base)
    for key in _AGENT_FIELDS:
        if key in update:
            config[key] = update[key]
    if not isinstance(config.get("model"), str) or not config["model"]:
        raise invalid(
            "Invalid type for 'model': expected a string.",
            param="model",
            code="invalid_request_error",
        )
    tools = config.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise invalid("Invalid type for 'tools': expected an array of objects.", param="tools")
    config["tools"] = [_normalize_tool(tool) for tool in tools]
    text = config.get("text") or {}
    if not isinstance(text, dict):
        raise invalid(
            "Invalid type for 'text': expected an object.",
            param="text",
            code="invalid_request_error",
        )
    config["text"] = {
        "format": text.get("format") or {"type": "text"},
        "verbosity": text.get("verbosity") or "medium",
    }
    reasoning = config.get("reasoning") or {}
    config["reasoning"] = {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")}
    config["service_tier"] = config.get("service_tier") or "auto"
    multi_agent = config.get("multi_agent") or {"enabled": False}
    enabled = bool(multi_agent.get("enabled"))
    limit = multi_agent.get("max_concurrent_subagents")
    config["multi_agent"] = {
        "enabled": enabled,
        "max_concurrent_subagents": (limit or 6) if enabled else limit,
    }
    config["metadata"] = parse_metadata(config.get("metadata"))
    config.setdefault("name", None)
    config.setdefault("instructions", None)
    return config


def _normalize_tool(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("type") == "function":
        return {"defer_loading": False, **tool}
    if tool.get("type") == "web_search":
        # Omitted or null settings are saved resolved (execution-tools.md, Web search).
        location = tool.get("location")
        return {
            **tool,
            "mode": tool.get("mode") or "live",
            "context_size": tool.get("context_size") or "medium",
            "allowed_domains": tool.get("allowed_domains"),
            "location": None
            if location is None
            else {key: location.get(key) for key in _LOCATION_FIELDS},
        }
    if tool.get("type") == "programmatic_tool_calling":
        return {"enabled": True, **tool}
    return dict(tool)


def _agent_wire(agent: AgentRecord) -> dict[str, Any]:
    config = {k: v for k, v in agent.config.items() if k != "x_agents_core"}
    return {
        **config,
        "id": agent.id,
        "object": "agent",
        "created_at": agent.created_at,
        "updated_at": agent.updated_at,
    }


def _public_session_agent(config: dict[str, Any]) -> dict[str, Any]:
    # The pinned Session tool union has no tool_search: Sessions project it out.
    keys = (
        "id",
        "model",
        "name",
        "instructions",
        "text",
        "reasoning",
        "service_tier",
        "multi_agent",
    )
    agent = {key: config.get(key) for key in keys}
    agent["tools"] = [tool for tool in config["tools"] if tool.get("type") != "tool_search"]
    return agent


def _inline_agent(body: dict[str, Any]) -> dict[str, Any]:
    """The inline ``agent`` of a Session creation, after its protocol checks."""
    inline = body.get("agent")
    if inline is None:
        return {}
    if not isinstance(inline, dict):
        raise invalid(
            f"Invalid type for 'agent': expected an object, but got {kind_of(inline)} instead.",
            param="agent",
            code="invalid_request_error",
        )
    reject_unknown(inline, _AGENT_FIELDS, prefix="agent.")
    _check_agent(inline, prefix="agent.")
    return inline


def _check_agent(body: dict[str, Any], *, prefix: str = "") -> None:
    """Protocol checks for a saved Agent: it may keep tools no Harness runs yet."""
    try:
        if "tools" in body:
            check_tools(body["tools"] or [], for_session=False)
        if body.get("text") is not None:
            check_text(body["text"], for_session=False)
    except AdmissionError as error:
        raise _admission_error(error, prefix) from None


def _admission_error(error: AdmissionError, prefix: str) -> ApiError:
    # The server's wording, not the SDK's friendlier local one (wire-semantics.md).
    message, param = error.server_error(prefix)
    return ApiError(400, error.code, message, param=param)


def _admit_session(inline: dict[str, Any], saved: dict[str, Any]) -> str | None:
    """Session admission over the effective configuration, as sent; returns the Harness.

    Inline fields replace saved ones whole, so each value is checked as its source
    wrote it, before defaults are filled in.
    """
    tools = inline["tools"] if "tools" in inline else saved.get("tools")
    text = inline["text"] if "text" in inline else saved.get("text")
    # An inline x_agents_core without a harness keeps the saved one (wire-semantics.md).
    harness = None
    for extension in (inline.get("x_agents_core"), saved.get("x_agents_core")):
        if isinstance(extension, dict) and "harness" in extension:
            harness = extension["harness"]
            break
    try:
        check_session_config(tools=tools or [], text=text, harness=harness)
    except AdmissionError as error:
        raise _admission_error(error, "agent." if inline else "") from None
    return harness if isinstance(harness, str) else None


def _check_content(messages: list[dict[str, Any]], harness: str | None, *, where: str) -> None:
    """The Session Harness's content rules for messages (message-content.md)."""
    try:
        for index, message in enumerate(messages):
            check_message_content(
                message["content"], harness=harness, field=f"{where}[{index}].content"
            )
    except AdmissionError as error:
        raise ApiError(400, error.code, error.message, param=error.field) from None


def _check_events_content(events: list[dict[str, Any]], harness: str | None) -> None:
    """Content a Session's Harness refuses is rejected before the batch is stored, so
    it never consumes a pending call (execution-tools.md, Functions)."""
    for index, event in enumerate(events):
        where = f"events[{index}]"
        if event["type"] == "agent.session.input.message":
            _check_content(event["input"], harness, where=f"{where}.input")
        elif event["type"] == "agent.session.input.tool_result":
            try:
                check_tool_result_content(
                    event.get("output"),
                    event.get("error"),
                    success=event["success"],
                    harness=harness,
                )
            except AdmissionError as error:
                param = f"{where}.{error.field}" if error.field else None
                raise ApiError(400, error.code, error.message, param=param) from None
