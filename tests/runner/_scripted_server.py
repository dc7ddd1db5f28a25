"""A scripted Agents API server on loopback for the input tests: one Session whose
``required_actions``, stream events and answers to result POSTs the test sets.

By default a result POST is answered 202 and applies its results as the contract says:
each call leaves ``required_actions``, its output Item is streamed, and once none is
left the Session turns idle (a snapshot is streamed).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

SESSION_ID = "sess_audit"
TURN_ID = "turn_audit"

#: Decides the answer to a result POST instead of the default; ``None`` applies it.
PostRule = Callable[[dict[str, Any], int], Response | None]


def api_error(
    status: int,
    code: str,
    message: str,
    type: str = "invalid_request_error",
    headers: dict[str, str] | None = None,
) -> Response:
    """An error envelope as the contract shapes it."""
    body = {"error": {"type": type, "code": code, "message": message, "param": None}}
    return JSONResponse(body, status_code=status, headers=headers)


def function_call(
    call_id: str, name: str, arguments: Any, turn_id: str = TURN_ID
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": call_id,
        "turn_id": turn_id,
        "name": name,
        "arguments": arguments,
    }


def item_done(action: dict[str, Any]) -> dict[str, Any]:
    """The ``item.done`` event of a completed function call."""
    return {
        "event_id": f"event_{time.monotonic_ns()}",
        "type": "agent.session.turn.item.done",
        "session_id": SESSION_ID,
        "turn_id": action["turn_id"],
        "item": {
            "id": f"fc_{action['call_id'][:40]}",
            "type": "function_call",
            "call_id": action["call_id"],
            "name": action["name"],
            "arguments": action["arguments"],
            "status": "completed",
            "turn_id": action["turn_id"],
        },
        "output_index": 0,
    }


class ScriptedServer:
    def __init__(self, tools: list[dict[str, Any]] | None = None) -> None:
        self.tools = tools or []
        self.required_actions: list[dict[str, Any]] = []
        self.status = "requires_action"
        #: Events sent to every stream right after it connects.
        self.on_connect: list[dict[str, Any]] = []
        self.post_rule: PostRule = lambda body, n: None
        self.posts: list[dict[str, Any]] = []
        self.applied: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._queues: list[asyncio.Queue[dict[str, Any] | None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        app = Starlette(
            routes=[
                Route("/v1/agents/sessions/{sid}", self._session, methods=["GET"]),
                Route("/v1/agents/sessions/{sid}/events", self._events, methods=["GET", "POST"]),
            ]
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="scripted-server")

    def start(self) -> ScriptedServer:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            assert time.monotonic() < deadline, "the scripted server did not start"
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(20)

    @property
    def base_url(self) -> str:
        port = self._server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    # -- state ------------------------------------------------------------------------

    def session(self) -> dict[str, Any]:
        with self._lock:
            actions = list(self.required_actions)
            status = self.status
        return {
            "id": SESSION_ID,
            "object": "agent.session",
            "agent": {
                "id": "agent_audit",
                "model": "scripted",
                "name": None,
                "instructions": None,
                "text": {"format": {"type": "text"}, "verbosity": "medium"},
                "reasoning": {"effort": None, "summary": None},
                "service_tier": "auto",
                "multi_agent": {"enabled": False, "max_concurrent_subagents": None},
                "tools": self.tools,
            },
            "created_at": 1,
            "last_active_at": 1,
            "environment": {"type": "none"},
            "error": None,
            "metadata": {},
            "required_actions": actions,
            "status": status,
            "usage": None,
            "vault_ids": [],
        }

    def snapshot_event(self) -> dict[str, Any]:
        session = self.session()
        kind = {"idle": "idle", "requires_action": "requires_action"}.get(
            session["status"], "in_progress"
        )
        return {
            "event_id": f"event_{time.monotonic_ns()}",
            "type": f"agent.session.{kind}",
            "session": session,
        }

    def broadcast(self, event: dict[str, Any]) -> None:
        loop = self._loop
        if loop is None:
            return
        for queue in list(self._queues):
            loop.call_soon_threadsafe(queue.put_nowait, event)

    def results_for(self, call_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [
                event
                for body in self.posts
                for event in body.get("events", [])
                if event.get("call_id") == call_id
            ]

    # -- routes -----------------------------------------------------------------------

    async def _session(self, request: Request) -> Response:
        return Response(json.dumps(self.session()), media_type="application/json")

    async def _events(self, request: Request) -> Response:
        if request.method == "GET":
            return self._stream()
        body = json.loads(await request.body())
        with self._lock:
            self.posts.append(body)
            count = len(self.posts)
        ruled = self.post_rule(body, count)
        if ruled is not None:
            return ruled
        self._apply(body)
        return Response(status_code=202)

    def _apply(self, body: dict[str, Any]) -> None:
        outputs = []
        with self._lock:
            for event in body.get("events", []):
                key = (event["turn_id"], event["call_id"])
                if key in self.applied:
                    continue
                self.applied[key] = event
                self.required_actions = [
                    a for a in self.required_actions if (a["turn_id"], a["call_id"]) != key
                ]
                outputs.append(event)
            if not self.required_actions:
                self.status = "idle"
        for event in outputs:
            self.broadcast(
                {
                    "event_id": f"event_{time.monotonic_ns()}",
                    "type": "agent.session.turn.item.added",
                    "session_id": SESSION_ID,
                    "turn_id": event["turn_id"],
                    "item": {
                        "id": f"fco_{event['call_id'][:40]}",
                        "type": "function_call_output",
                        "call_id": event["call_id"],
                        "output": event.get("output"),
                        "error": event.get("error"),
                        "status": "completed" if event["success"] else "failed",
                        "turn_id": event["turn_id"],
                    },
                    "output_index": None,
                }
            )
        self.broadcast(self.snapshot_event())

    def _stream(self) -> Response:
        self._loop = asyncio.get_running_loop()
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        for event in self.on_connect:
            queue.put_nowait(event)
        self._queues.append(queue)

        async def frames() -> AsyncIterator[bytes]:
            yield b": connected\n\n"
            try:
                while True:
                    try:
                        event = await asyncio.wait_for(queue.get(), 0.2)
                    except asyncio.TimeoutError:
                        yield b": keepalive\n\n"
                        continue
                    if event is None:
                        return
                    data = json.dumps(event, separators=(",", ":"))
                    yield f"event: {event.get('type', 'x')}\ndata: {data}\n\n".encode()
            finally:
                self._queues.remove(queue)

        return StreamingResponse(frames(), media_type="text/event-stream")
