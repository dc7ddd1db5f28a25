"""Starlette routes for the Agents API subset the SDK uses.

Each route runs the wire checks in the server's order (``OpenAI-Beta``, then the bearer
key, then the body gate, then validation) before calling the engine, and every response
carries a fresh ``X-Request-Id``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .._admission import check_session_config, check_text, check_tools
from .._errors import AdmissionError
from ._engine import ApiError, Engine, Subscriber, invalid, not_found
from ._store import AgentRecord, new_id, now

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
    "prompt_cache_options",
    "review",
    "spend_control",
    "stream_options",
    "x_agents_core",
)

Handler = Callable[[Request], Awaitable[Response]]
_T = TypeVar("_T")


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
        body = await _json_body(request, _JSON_BODY_LIMIT)
        _reject_unknown(body, _AGENT_FIELDS)
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
        query = _ListQuery(request, strict_limit=False)
        agents = sorted(
            (a for a in self.engine.store.agents.values() if not a.deleted),
            key=lambda a: (a.created_at, a.id),
        )
        return _json(query.page(agents, lambda a: a.id, _agent_wire, cursor_error=not_found()))

    async def retrieve_agent(self, request: Request) -> Response:
        return _json(_agent_wire(self._agent(request.path_params["agent_id"])))

    async def update_agent(self, request: Request) -> Response:
        body = await _json_body(request, _JSON_BODY_LIMIT)
        _reject_unknown(body, _AGENT_FIELDS)
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
        body = await _json_body(request, _SESSION_CREATE_BODY_LIMIT)
        _reject_unknown(body, _SESSION_FIELDS)
        key = _idempotency_key(request)
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
        messages = _creation_messages(raw_input)
        metadata = _metadata(body.get("metadata"))
        vault_ids = body.get("vault_ids") or []
        if not isinstance(vault_ids, list) or not all(isinstance(v, str) for v in vault_ids):
            raise invalid(
                "vault_ids must be a list of strings.",
                param="vault_ids",
                code="invalid_request_error",
            )

        store = self.engine.store
        fingerprint = _canonical(body)
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

        agent = self._session_agent(body)
        session, subscriber = self.engine.create_session(
            agent=_public_session_agent(agent),
            environment={"type": "none"},
            metadata=metadata,
            vault_ids=list(vault_ids),
            messages=messages,
            stream=stream,
        )
        if key is not None:
            store.add_creation_key(key, fingerprint, session.id)
            store.commit()
        if subscriber is not None:
            return self._sse(subscriber, 201)
        return _json(self.engine.session_wire(session), 201)

    def _session_agent(self, body: dict[str, Any]) -> dict[str, Any]:
        """Resolve ``agent_id`` and the inline ``agent`` into the frozen configuration."""
        inline = body.get("agent") or {}
        if not isinstance(inline, dict):
            raise invalid(
                "Invalid type for 'agent': expected an object.",
                param="agent",
                code="invalid_request_error",
            )
        _reject_unknown(inline, _AGENT_FIELDS, prefix="agent.")
        if "agent_id" in body:
            agent_id = body["agent_id"]
            if not isinstance(agent_id, str):
                raise invalid(
                    "Invalid type for 'agent_id': expected a string, "
                    f"but got {_kind(agent_id)} instead.",
                    param="agent_id",
                    code="invalid_request_error",
                )
            saved = self._agent(agent_id)
            _admit_session(inline, saved.config)
            return {**_agent_config(saved.config, inline), "id": saved.id}
        _admit_session(inline, {})
        return {**_agent_config({"model": _DEFAULT_MODEL}, inline), "id": new_id("agent")}

    async def list_sessions(self, request: Request) -> Response:
        query = _ListQuery(request, strict_limit=False)
        agent_filter = request.query_params.get("agent_id")
        sessions = sorted(
            (
                s
                for s in self.engine.store.sessions.values()
                if not s.deleted and (agent_filter is None or s.agent.get("id") == agent_filter)
            ),
            key=lambda s: (s.created_at, s.id),
        )
        return _json(
            query.page(sessions, lambda s: s.id, self.engine.session_wire, cursor_error=not_found())
        )

    async def retrieve_session(self, request: Request) -> Response:
        return _json(
            self.engine.session_wire(self.engine.session(request.path_params["session_id"]))
        )

    async def update_session(self, request: Request) -> Response:
        body = await _json_body(request, _JSON_BODY_LIMIT)
        session = self.engine.session(request.path_params["session_id"])
        if not body:
            raise invalid("At least one update field is required", code="invalid_request_error")
        _reject_unknown(body, ("metadata",))
        session.metadata = _metadata(body["metadata"])
        self.engine.store.save(session)
        self.engine.store.commit()
        return _json(self.engine.session_wire(session))

    async def delete_session(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        self.engine.delete_session(session_id)
        return _json({"id": session_id, "object": "agent.session.deleted", "deleted": True})

    # -- events ------------------------------------------------------------------------

    async def post_events(self, request: Request) -> Response:
        body = await _json_body(request, _JSON_BODY_LIMIT)
        key = _idempotency_key(request)
        events = _input_events(body)
        self.engine.session(request.path_params["session_id"])
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
        return ApiError(
            503,
            "service_unavailable",
            "The service is temporarily unavailable. Retry with the same Idempotency-Key.",
            headers={"Retry-After": str(self.engine.faults.retry_after)},
        )

    async def stream_events(self, request: Request) -> Response:
        # Last-Event-ID is ignored on purpose: the stream is live only and never replays.
        session = self.engine.session(request.path_params["session_id"])
        return self._sse(self.engine.subscribe(session.id), 200)

    def _sse(self, subscriber: Subscriber, status: int) -> Response:
        return StreamingResponse(
            self._event_stream(subscriber),
            status_code=status,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )

    async def _event_stream(self, subscriber: Subscriber) -> AsyncIterator[str]:
        faults = self.engine.faults
        sent = 0
        try:
            yield ": connected\n\n"
            while True:
                try:
                    event = await subscriber.next(self.keepalive_interval)
                except asyncio.TimeoutError:
                    yield ": keepalive\n\n"
                    continue
                if event is None:
                    if subscriber.overflowed:
                        yield _sse_frame(_interrupted(subscriber.session_id))
                    return
                yield _sse_frame(event)
                sent += 1
                if faults.duplicate_every and sent % faults.duplicate_every == 0:
                    yield _sse_frame(event)
                if faults.close_stream_after and sent >= faults.close_stream_after:
                    return
                if subscriber.until_idle and event["type"] in (
                    "agent.session.idle",
                    "agent.session.failed",
                ):
                    return
        finally:
            self.engine.unsubscribe(subscriber)

    # -- turns and items -----------------------------------------------------------------

    async def list_turns(self, request: Request) -> Response:
        query = _ListQuery(request, strict_limit=True)
        session = self.engine.session(request.path_params["session_id"])
        turns = [self.engine.store.turns[turn_id] for turn_id in session.turn_ids]
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
        query = _ListQuery(request, strict_limit=False)
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
        raise ApiError(404, "unsupported_operation", "This API route does not exist.")


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
        if status == 405:
            error = _method_not_allowed("GET,HEAD,POST,DELETE")
        else:
            error = ApiError(status, "unsupported_operation", "This API route does not exist.")
        response = JSONResponse(error.envelope(), status_code=error.status, headers=error.headers)
        _stamp(response, time.monotonic())
        return response

    return Starlette(
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


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


async def _single(chunk: str) -> AsyncIterator[str]:
    yield chunk


def _sse_frame(event: dict[str, Any]) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n"


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


async def _json_body(request: Request, limit: int) -> dict[str, Any]:
    """The body gate every JSON route passes, in the contract's order."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json" and not (
        content_type.startswith("application/") and content_type.endswith("+json")
    ):
        raise invalid(
            "expected request with Content-Type: application/json", code="invalid_request_error"
        )
    raw = await request.body()
    if len(raw) > limit:
        raise ApiError(
            413, "request_too_large", f"The request body exceeds the {limit // 1024} KiB limit."
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid(
            "Invalid body: encountered a unicode decode error when parsing this JSON value. "
            "Please check the value to ensure it is valid unicode.",
            code="invalid_request_error",
        ) from None
    if not text:
        return {}
    try:
        value = json.loads(text, object_pairs_hook=_reject_duplicate_keys)
    except _DuplicateKey as duplicate:
        raise invalid(
            f"Invalid body: duplicate JSON key '{duplicate.key}'. "
            "Duplicate JSON keys are not supported.",
            code="invalid_request_error",
        ) from None
    except ValueError:
        raise invalid(
            "Invalid body: failed to parse JSON value. "
            "Please check the value to ensure it is valid JSON.",
            code="invalid_request_error",
        ) from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid(
            f"Invalid type: expected an object, but got {_kind(value)} instead.",
            code="invalid_request_error",
        )
    return value


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _reject_unknown(body: dict[str, Any], allowed: Sequence[str], *, prefix: str = "") -> None:
    for key in body:
        if key not in allowed:
            path = prefix + key
            raise invalid(f"Unknown parameter: '{path}'.", param=path, code="invalid_request_error")


def _idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key")
    if not key:
        return None
    if len(key.encode()) > 128 or not key.strip():
        raise invalid(
            "Idempotency-Key must be 1 to 128 bytes and not only whitespace.",
            param="Idempotency-Key",
        )
    return key


def _metadata(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid(
            f"Invalid type for 'metadata': expected an object, but got {_kind(value)} instead.",
            param="metadata",
            code="invalid_request_error",
        )
    for key, item in value.items():
        if not isinstance(item, str):
            raise invalid(
                f"Invalid type for 'metadata.{key}': expected a string, "
                f"but got {_kind(item)} instead.",
                param=f"metadata.{key}",
                code="invalid_request_error",
            )
    if len(value) > 16:
        raise invalid(
            "Metadata can hold at most 16 pairs.", param="metadata", code="invalid_request_error"
        )
    return dict(value)


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
    config["metadata"] = _metadata(config.get("metadata"))
    config.setdefault("name", None)
    config.setdefault("instructions", None)
    return config


def _normalize_tool(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("type") == "function":
        return {"defer_loading": False, **tool}
    if tool.get("type") == "web_search":
        return {
            "mode": "live",
            "context_size": "medium",
            "allowed_domains": None,
            "location": None,
            **tool,
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


def _check_agent(body: dict[str, Any]) -> None:
    """Protocol checks for a saved Agent: it may keep tools no Harness runs yet."""
    try:
        if "tools" in body:
            check_tools(body["tools"] or [], for_session=False)
        if body.get("text") is not None:
            check_text(body["text"], for_session=False)
    except AdmissionError as error:
        raise ApiError(400, error.code, error.message, param=error.field) from None


def _admit_session(inline: dict[str, Any], saved: dict[str, Any]) -> None:
    """Session admission over the effective configuration, as sent.

    Inline fields replace saved ones whole, so each value is checked as its source
    wrote it, before defaults are filled in.
    """
    tools = inline["tools"] if "tools" in inline else saved.get("tools")
    text = inline["text"] if "text" in inline else saved.get("text")
    extension = inline.get("x_agents_core") or saved.get("x_agents_core")
    harness = extension.get("harness") if isinstance(extension, dict) else None
    try:
        check_session_config(tools=tools or [], text=text, harness=harness)
    except AdmissionError as error:
        param = f"agent.{error.field}" if error.field and inline else error.field
        raise ApiError(400, error.code, error.message, param=param) from None


# -- input validation ---------------------------------------------------------------------


def _creation_messages(raw: object) -> list[dict[str, Any]]:
    if isinstance(raw, str):
        if not raw:
            raise invalid("Initial input must not be an empty string.", param="input")
        return [{"role": "user", "content": [{"type": "input_text", "text": raw}]}]
    return _messages(raw, "input")


def _messages(raw: object, where: str) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise invalid(f"'{where}' must be a non-empty array of user messages.", param=where)
    return [_message(message, f"{where}[{index}]") for index, message in enumerate(raw)]


def _message(message: object, where: str) -> dict[str, Any]:
    if not isinstance(message, dict):
        raise invalid(f"'{where}' must be a message object.", param=where)
    _reject_unknown(message, ("role", "type", "content"), prefix=f"{where}.")
    if message.get("role") != "user":
        raise invalid(f"'{where}.role' must be 'user'.", param=f"{where}.role")
    if "type" in message and message["type"] != "message":
        raise invalid(f"'{where}.type' must be 'message' when present.", param=f"{where}.type")
    content = message.get("content")
    if not isinstance(content, list) or not content:
        raise invalid(
            f"'{where}.content' must be a non-empty array of content parts.",
            param=f"{where}.content",
        )
    parts = [_content_part(part, f"{where}.content[{index}]") for index, part in enumerate(content)]
    if not any(part["type"] == "input_image" or part["text"] for part in parts):
        raise invalid(
            f"'{where}' needs an image or a non-empty text part.", param=f"{where}.content"
        )
    return dict(message)


def _content_part(part: object, where: str) -> dict[str, Any]:
    if isinstance(part, dict):
        if (
            part.get("type") == "input_text"
            and isinstance(part.get("text"), str)
            and len(part) == 2
        ):
            return part
        if (
            part.get("type") == "input_image"
            and isinstance(part.get("image_url"), str)
            and len(part) == 2
        ):
            return part
    raise invalid(f"'{where}' must be an input_text or input_image part.", param=where)


def _input_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    _reject_unknown(body, ("events",))
    if "events" not in body:
        raise invalid(
            "Missing required parameter: 'events'.", param="events", code="invalid_request_error"
        )
    events = body["events"]
    if not isinstance(events, list):
        raise invalid(
            f"Invalid type for 'events': expected an array, but got {_kind(events)} instead.",
            param="events",
            code="invalid_request_error",
        )
    if len(events) > 64:
        raise invalid("A batch holds 1 to 64 events.", param="events")
    checked = [_input_event(event, f"events[{index}]") for index, event in enumerate(events)]
    if len(_canonical(checked).encode()) > 512 * 1024:
        raise invalid("The stored input of one request can be at most 512 KiB.", param="events")
    return checked


def _input_event(event: object, where: str) -> dict[str, Any]:
    if not isinstance(event, dict):
        raise invalid(
            f"'{where}' must be an event object.", param=where, code="invalid_request_error"
        )
    kind = event.get("type")
    if kind == "agent.session.input.message":
        _reject_unknown(event, ("type", "input"), prefix=f"{where}.")
        return {"type": kind, "input": _messages(event.get("input"), f"{where}.input")}
    if kind == "agent.session.input.cancel":
        _reject_unknown(event, ("type",), prefix=f"{where}.")
        return dict(event)
    if kind == "agent.session.input.tool_result":
        _reject_unknown(
            event, ("type", "turn_id", "call_id", "success", "output", "error"), prefix=f"{where}."
        )
        for name in ("turn_id", "call_id", "success"):
            if name not in event:
                path = f"{where}.{name}"
                raise invalid(
                    f"Missing required parameter: '{path}'.",
                    param=path,
                    code="invalid_request_error",
                )
        if not isinstance(event["turn_id"], str) or not event["turn_id"]:
            raise invalid(
                f"'{where}.turn_id' must be a non-empty Turn ID.", param=f"{where}.turn_id"
            )
        if not isinstance(event["call_id"], str) or not event["call_id"].strip():
            raise invalid(
                f"'{where}.call_id' must be a non-blank call ID.", param=f"{where}.call_id"
            )
        if not isinstance(event["success"], bool):
            raise invalid(f"'{where}.success' must be a boolean.", param=f"{where}.success")
        output = event.get("output")
        if isinstance(output, list):
            for index, part in enumerate(output):
                _content_part(part, f"{where}.output[{index}]")
        elif output is not None and not isinstance(output, str):
            raise invalid(
                f"'{where}.output' must be a string or content parts.", param=f"{where}.output"
            )
        if event.get("error") is not None and not isinstance(event["error"], str):
            raise invalid(f"'{where}.error' must be a string.", param=f"{where}.error")
        # Stored exactly as sent: field presence is part of the result's identity.
        return dict(event)
    raise invalid(
        "Invalid value for 'type': expected agent.session.input.message, "
        "agent.session.input.cancel or agent.session.input.tool_result.",
        param=f"{where}.type",
        code="invalid_request_error",
    )


# -- lists ----------------------------------------------------------------------------------


class _ListQuery:
    """``after``/``limit``/``order`` with the Beta list rules (wire-semantics.md)."""

    def __init__(self, request: Request, *, strict_limit: bool) -> None:
        params = request.query_params
        for key in ("after", "limit", "order"):
            if len(params.getlist(key)) > 1:
                raise invalid(
                    f"Failed to deserialize query string: duplicate field `{key}`",
                    code="invalid_request_error",
                )
        self.after = params["after"].strip() if "after" in params else None
        self.limit = _limit(params.get("limit"), strict=strict_limit)
        order = params.get("order", "desc")
        if order not in ("asc", "desc"):
            raise invalid(
                "Failed to deserialize query string: order: unknown variant "
                f"`{order}`, expected `asc` or `desc`",
                code="invalid_request_error",
            )
        self.order = order

    def page(
        self,
        records: Sequence[_T],
        record_id: Callable[[_T], str],
        wire: Callable[[_T], dict[str, Any]],
        *,
        cursor_error: ApiError,
    ) -> dict[str, Any]:
        ordered = list(records) if self.order == "asc" else list(reversed(records))
        if self.after:
            ids = [record_id(record) for record in ordered]
            if self.after not in ids:
                raise cursor_error
            ordered = ordered[ids.index(self.after) + 1 :]
        data = [wire(record) for record in ordered[: self.limit]]
        return {
            "object": "list",
            "data": data,
            "has_more": len(ordered) > self.limit,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }


def _limit(raw: str | None, *, strict: bool) -> int:
    if raw is None:
        return 20
    digits = raw[1:] if raw.startswith("+") else raw
    if not digits.isdigit():
        raise invalid(
            "Failed to deserialize query string: limit: invalid digit found in string",
            code="invalid_request_error",
        )
    value = int(digits)
    if value >= 2**63:
        raise invalid(
            "Failed to deserialize query string: limit: number too large to fit in target type",
            code="invalid_request_error",
        )
    if strict:
        if not 1 <= value <= 100:
            raise invalid("limit must be between 1 and 100", code="invalid_request_error")
        return value
    return min(max(value, 1), 100)
