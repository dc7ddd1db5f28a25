"""Helpers for the emulator tests: raw HTTP, a threaded SSE reader and the openai oracle."""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
from openai._models import BaseModel as OpenAIModel
from openai.types.beta import AgentSession
from openai.types.beta.agent_session_event import AgentSessionEvent
from pydantic import BaseModel, TypeAdapter

from openagentcore.local import LocalCore

EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(AgentSessionEvent)

FUNCTION_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
    {
        "type": "function",
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    },
]


def assert_no_extra(model: object, path: str = "$") -> None:
    """Fail when a parsed openai model kept fields its type does not declare."""
    if isinstance(model, BaseModel):
        extra = model.__pydantic_extra__ or {}
        assert not extra, f"{path} has fields openai 3.51 does not declare: {sorted(extra)}"
        for name in type(model).model_fields:
            assert_no_extra(getattr(model, name), f"{path}.{name}")
    elif isinstance(model, list):
        for index, value in enumerate(model):
            assert_no_extra(value, f"{path}[{index}]")
    elif isinstance(model, dict):
        for key, value in model.items():
            assert_no_extra(value, f"{path}.{key}")


def parse_strict(adapter_or_type: Any, data: object) -> Any:
    """Parse with openai's types, no coercion, and no undeclared fields."""
    if isinstance(adapter_or_type, TypeAdapter):
        parsed = adapter_or_type.validate_python(data, strict=True)
    else:
        assert issubclass(adapter_or_type, OpenAIModel)
        parsed = adapter_or_type.model_validate(data, strict=True)
    assert_no_extra(parsed)
    return parsed


class Api:
    """Raw HTTP against a LocalCore, with the Beta and bearer headers set."""

    def __init__(self, core: LocalCore) -> None:
        self.core = core
        self.http = httpx.Client(
            base_url=core.base_url,
            headers={"Authorization": f"Bearer {core.api_key}", "OpenAI-Beta": "agents=v1"},
            timeout=5,
        )

    def close(self) -> None:
        self.http.close()

    def create_session(
        self, *, tools: list[dict[str, Any]] | None = None, **body: Any
    ) -> dict[str, Any]:
        body.setdefault("environment", {"type": "none"})
        body.setdefault("input", "hello")
        if tools is not None:
            body.setdefault("agent", {})["tools"] = tools
        response = self.http.post("/agents/sessions", json=body)
        assert response.status_code == 201, response.text
        session: dict[str, Any] = response.json()
        parse_strict(AgentSession, session)
        return session

    def session(self, session_id: str) -> dict[str, Any]:
        response = self.http.get(f"/agents/sessions/{session_id}")
        assert response.status_code == 200, response.text
        session: dict[str, Any] = response.json()
        parse_strict(AgentSession, session)
        return session

    def post_events(
        self, session_id: str, events: Any, *, key: str | None = None
    ) -> httpx.Response:
        headers = {"Idempotency-Key": key} if key is not None else {}
        return self.http.post(
            f"/agents/sessions/{session_id}/events", json={"events": events}, headers=headers
        )

    def wait_status(self, session_id: str, *statuses: str, timeout: float = 5.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            session = self.session(session_id)
            if session["status"] in statuses:
                return session
            assert time.monotonic() < deadline, (
                f"session stayed {session['status']}, wanted {statuses}"
            )
            time.sleep(0.005)

    def items(self, session_id: str) -> list[dict[str, Any]]:
        response = self.http.get(
            f"/agents/sessions/{session_id}/items", params={"order": "asc", "limit": 100}
        )
        assert response.status_code == 200, response.text
        data: list[dict[str, Any]] = response.json()["data"]
        return data

    def run_turn_with_results(
        self, session_id: str, output: Callable[[dict[str, Any]], str]
    ) -> dict[str, Any]:
        """Answer every required action until the Session is idle; return the idle Session."""
        while True:
            session = self.wait_status(session_id, "requires_action", "idle", "failed")
            if session["status"] != "requires_action":
                return session
            events = [
                result_event(action, output(action)) for action in session["required_actions"]
            ]
            response = self.post_events(session_id, events)
            assert response.status_code == 202, response.text
            answered = {action["call_id"] for action in session["required_actions"]}
            deadline = time.monotonic() + 5
            while answered & {a["call_id"] for a in self.session(session_id)["required_actions"]}:
                assert time.monotonic() < deadline, "submitted results were never applied"
                time.sleep(0.005)


def result_event(action: dict[str, Any], output: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "agent.session.input.tool_result",
        "turn_id": action["turn_id"],
        "call_id": action["call_id"],
        "success": True,
        "output": output,
        **extra,
    }


def message_event(text: str) -> dict[str, Any]:
    return {
        "type": "agent.session.input.message",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": text}]}],
    }


def iter_sse(response: httpx.Response) -> Iterator[tuple[str, str]]:
    """Yield ``(kind, payload)``: ``("event", json)`` or ``("comment", text)``."""
    data: list[str] = []
    for line in response.iter_lines():
        if line.startswith(":"):
            yield "comment", line[1:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif not line and data:
            yield "event", "\n".join(data)
            data = []


class EventReader:
    """Reads a stream in a thread; every event is checked against openai's types."""

    def __init__(
        self, api: Api, session_id: str | None = None, *, response: httpx.Response | None = None
    ) -> None:
        self.events: list[dict[str, Any]] = []
        self.comments: list[str] = []
        self.closed = threading.Event()
        self.errors: list[BaseException] = []
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue()
        self._client = httpx.Client(
            base_url=api.core.base_url, headers=api.http.headers, timeout=None
        )
        if response is None:
            request = self._client.build_request("GET", f"/agents/sessions/{session_id}/events")
            response = self._client.send(request, stream=True)
        self.response = response
        assert response.status_code in (200, 201), response.read()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for kind, payload in iter_sse(self.response):
                if kind == "comment":
                    self.comments.append(payload)
                    continue
                event = json.loads(payload)
                parse_strict(EVENT_ADAPTER, event)
                self.events.append(event)
                self._queue.put(event)
        except httpx.HTTPError:
            pass
        except BaseException as error:  # surfaced by wait_for and close
            self.errors.append(error)
        finally:
            self.closed.set()

    def wait_for(self, event_type: str, timeout: float = 5.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            assert not self.errors, self.errors
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no {event_type} event; got {[e['type'] for e in self.events]}"
            try:
                event = self._queue.get(timeout=min(remaining, 0.05))
            except queue.Empty:
                if self.closed.is_set() and self._queue.empty():
                    raise AssertionError(f"stream closed before {event_type}") from None
                continue
            if event["type"] == event_type:
                return event

    def wait_closed(self, timeout: float = 5.0) -> None:
        assert self.closed.wait(timeout), "the stream stayed open"
        assert not self.errors, self.errors

    def types(self) -> list[str]:
        return [event["type"] for event in self.events]

    def close(self) -> None:
        # Shutting the socket down wakes the reader thread at once; closing alone would
        # leave it blocked until the next keepalive.
        stream = self.response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.response.close()
        self._client.close()
        self._thread.join(timeout=5)
        assert not self.errors, self.errors
