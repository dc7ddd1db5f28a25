"""The client against hostile and broken servers (issue 13), sync and async.

Every test talks over real loopback sockets to a server from ``_hostile.py`` that
misbehaves on purpose: it redirects, loops, trickles, inflates, nests, or frames
events oddly. Each row of the issue's table has a test here; the store rows live in
``tests/store/test_store_hostile.py``.
"""

from __future__ import annotations

import copy
import gzip
import json
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from openagentcore import (
    APIConnectionError,
    APIResponseValidationError,
    APITimeoutError,
    AsyncClient,
    Client,
    InternalServerError,
    NotFoundError,
    OpenAgentCoreError,
    RedirectError,
    ResponseLimits,
    ResponseTooLargeError,
    ServiceUnavailableError,
)
from openagentcore.types import (
    InputMessageEvent,
    ItemDoneEvent,
    SessionCreatedEvent,
    TurnCompletedEvent,
)

from . import _hostile as hostile
from ._support import API_KEY, AnyClient, close, collect, corpus, resolve

pytestmark = pytest.mark.anyio

SESSION = corpus("sessions")["idle_new"]
AGENT = corpus("agents")["minimal"]
EVENTS = corpus("events")


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make(kind: str, base_url: str, **options: Any) -> AnyClient:
    cls = Client if kind == "sync" else AsyncClient
    return cls(api_key=API_KEY, base_url=base_url, **options)


@pytest.fixture
async def opened() -> AsyncIterator[list[AnyClient]]:
    """Clients a test made; closed after it."""
    clients: list[AnyClient] = []
    yield clients
    for client in clients:
        await close(client)


def sse(*events: dict[str, Any] | str) -> bytes:
    return b"".join(
        event.encode()
        if isinstance(event, str)
        else f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
        for event in events
    )


class Exhausted(Exception):
    """The stream ended (StopIteration cannot cross a coroutine)."""


async def next_event(stream: Any) -> Any:
    try:
        if hasattr(stream, "__anext__"):
            return await stream.__anext__()
        return next(stream)
    except (StopIteration, StopAsyncIteration):
        raise Exhausted from None


# Redirects


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_redirect_on_event_submission_is_an_error_naming_the_location(
    kind: str, status: int, opened: list[AnyClient]
) -> None:
    """A 3xx was taken for success: ``events.create`` returned and the runner marked
    a result submitted that the server never stored."""
    target = "http://user:secret@elsewhere.test/v1/agents/sessions/se_1/events"
    with hostile.serving(hostile.answer(status, b"", {"Location": target})) as server:
        client = make(kind, server.url)
        opened.append(client)
        with pytest.raises(RedirectError) as caught:
            await resolve(
                client.sessions.events.create("se_1", events=[InputMessageEvent.from_text("hi")])
            )
    assert caught.value.status_code == status
    assert caught.value.location == "http://elsewhere.test/v1/agents/sessions/se_1/events"
    assert "elsewhere.test" in str(caught.value)
    assert "secret" not in str(caught.value)
    assert len(server.requests) == 1, "a redirect is neither followed nor retried"


async def test_redirect_on_a_read_is_an_error_too(kind: str, opened: list[AnyClient]) -> None:
    handler = hostile.answer(302, SESSION, {"Location": "/v2/agents/sessions/se_1"})
    with hostile.serving(handler) as server:
        client = make(kind, server.url)
        opened.append(client)
        with pytest.raises(RedirectError, match="/v2/agents/sessions/se_1"):
            await resolve(client.sessions.retrieve("se_1"))


async def test_a_given_http_client_that_follows_redirects_still_does_not(
    opened: list[AnyClient],
) -> None:
    with hostile.serving(hostile.answer(307, b"", {"Location": "/v1/other"})) as server:
        http = httpx.Client(follow_redirects=True)
        client = Client(api_key=API_KEY, base_url=server.url, http_client=http)
        opened.append(client)
        with pytest.raises(RedirectError):
            client.sessions.retrieve("se_1")
    http.close()  # noqa: ASYNC212
    assert len(server.requests) == 1


# Pagination loops


def _page_handler(pages: list[dict[str, Any]]) -> hostile.Handler:
    def handle(
        conn: socket.socket, request: hostile.Request, server: hostile.HostileServer
    ) -> None:
        page = pages[min(len(server.requests) - 1, len(pages) - 1)]
        conn.sendall(hostile.response_bytes(200, json.dumps(page).encode()))

    return handle


async def test_a_repeating_cursor_is_refused_instead_of_looping(
    kind: str, opened: list[AnyClient]
) -> None:
    session = copy.deepcopy(SESSION)
    same = {
        "data": [session],
        "has_more": True,
        "first_id": session["id"],
        "last_id": session["id"],
    }
    with hostile.serving(_page_handler([same])) as server:
        client = make(kind, server.url)
        opened.append(client)
        with pytest.raises(APIResponseValidationError, match="already visited"):
            await collect(client.sessions.list())
    assert len(server.requests) == 2


async def test_a_cursor_cycle_over_several_pages_is_refused(
    kind: str, opened: list[AnyClient]
) -> None:
    def page(last: str) -> dict[str, Any]:
        return {**_one_session_page(last), "has_more": True}

    with hostile.serving(_page_handler([page("a"), page("b"), page("a")])) as server:
        client = make(kind, server.url)
        opened.append(client)
        with pytest.raises(APIResponseValidationError, match="'a' was already visited"):
            await collect(client.sessions.list())
    assert len(server.requests) == 3


async def test_an_empty_page_promising_more_is_refused(kind: str, opened: list[AnyClient]) -> None:
    empty = {"data": [], "has_more": True, "first_id": None, "last_id": "se_9"}
    with hostile.serving(_page_handler([empty])) as server:
        client = make(kind, server.url)
        opened.append(client)
        with pytest.raises(APIResponseValidationError, match="empty but has_more"):
            await collect(client.sessions.list())
    assert len(server.requests) == 1


def _one_session_page(last: str) -> dict[str, Any]:
    session = {**copy.deepcopy(SESSION), "id": last}
    return {"data": [session], "has_more": False, "first_id": last, "last_id": last}


# Trickling servers and the whole-request deadline

#: What a slow server sends of a 200 answer, one byte per pause.
TRICKLED = hostile.response_bytes(200, json.dumps(SESSION).encode())


@pytest.mark.parametrize("where", ["headers", "body"])
async def test_a_trickling_server_cannot_hold_a_request_past_its_deadline(
    kind: str, where: str, opened: list[AnyClient]
) -> None:
    """Each byte arrives well within the read timeout, so only a deadline on the whole
    attempt ends it: before, ``Client(timeout=2)`` was still blocked after 25 s."""
    head_end = TRICKLED.index(b"\r\n\r\n") + 4

    def handle(
        conn: socket.socket, request: hostile.Request, server: hostile.HostileServer
    ) -> None:
        start = 0 if where == "headers" else head_end
        conn.sendall(TRICKLED[:start])
        for index in range(start, len(TRICKLED)):
            conn.sendall(TRICKLED[index : index + 1])
            if server.pause(0.25):
                return

    with hostile.serving(handle) as server:
        client = make(kind, server.url, timeout=1.0, max_retries=0)
        opened.append(client)
        started = time.monotonic()
        with pytest.raises(APITimeoutError):
            await resolve(client.sessions.retrieve("se_1"))
        elapsed = time.monotonic() - started
    # The whole answer would take over a minute; the deadline is 1 s. The bound is
    # generous so a loaded machine cannot make this flaky.
    assert elapsed < 15


async def test_per_request_timeout_overrides_the_clients(
    kind: str, opened: list[AnyClient]
) -> None:
    with hostile.serving(hostile.trickle(TRICKLED, 0.25)) as server:
        client = make(kind, server.url, timeout=600, max_retries=0)
        opened.append(client)
        started = time.monotonic()
        with pytest.raises(APITimeoutError):
            await resolve(client.sessions.retrieve("se_1", timeout=1.0))
    assert time.monotonic() - started < 15


async def test_an_event_that_never_completes_times_the_stream_out(
    kind: str, opened: list[AnyClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream kept alive by one byte at a time, never finishing an event, is dead."""
    monkeypatch.setattr("openagentcore._base_client.STREAM_READ_TIMEOUT", 1.0)

    def handle(
        conn: socket.socket, request: hostile.Request, server: hostile.HostileServer
    ) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        )
        while not server.pause(0.25):
            conn.sendall(b"x")

    with hostile.serving(handle) as server:
        client = make(kind, server.url, max_retries=0)
        opened.append(client)
        stream = await resolve(client.sessions.events.stream("se_1"))
        started = time.monotonic()
        with pytest.raises(APITimeoutError):
            await next_event(stream)
    assert time.monotonic() - started < 15


# Size caps


async def test_a_gzip_bomb_is_stopped_at_the_body_cap(kind: str, opened: list[AnyClient]) -> None:
    bomb = hostile.gzip_bomb(64 * 1024 * 1024)
    assert len(bomb) < 100_000
    handler = hostile.answer(200, bomb, {"Content-Encoding": "gzip"})
    with hostile.serving(handler) as server:
        limits = ResponseLimits(max_body_bytes=1024 * 1024)
        client = make(kind, server.url, response_limits=limits)
        opened.append(client)
        with pytest.raises(ResponseTooLargeError, match="larger than 1048576 bytes"):
            await resolve(client.sessions.retrieve("se_1"))
    assert len(server.requests) == 1, "a body over the cap is not retried"


async def test_a_huge_page_is_stopped_at_the_body_cap(kind: str, opened: list[AnyClient]) -> None:
    session = copy.deepcopy(SESSION)
    page = {"data": [session] * 2000, "has_more": False, "first_id": None, "last_id": None}
    body = json.dumps(page).encode()
    assert len(body) > 1024 * 1024
    with hostile.serving(hostile.answer(200, body)) as server:
        client = make(kind, server.url, response_limits=ResponseLimits(max_body_bytes=1024 * 1024))
        opened.append(client)
        with pytest.raises(ResponseTooLargeError):
            await resolve(client.sessions.list())


async def test_an_unterminated_event_line_is_stopped_at_the_event_cap(
    kind: str, opened: list[AnyClient]
) -> None:
    with hostile.serving(hostile.endless_line()) as server:
        limits = ResponseLimits(max_event_bytes=1024 * 1024)
        client = make(kind, server.url, response_limits=limits)
        opened.append(client)
        stream = await resolve(client.sessions.events.stream("se_1"))
        with pytest.raises(ResponseTooLargeError, match="larger than 1048576 bytes"):
            await next_event(stream)
        with pytest.raises(Exhausted):
            await next_event(stream)


@pytest.mark.timeout(60)
def test_an_endless_line_is_scanned_once_not_once_per_chunk() -> None:
    """Up to the default 64 MiB cap, a line arriving in 64 KiB chunks was rescanned
    from its start on every chunk: 89 s of CPU on this machine, against 0.2 s now.
    The 60 s bound is far from both, so load cannot flake it."""
    from openagentcore._streaming import _SSEParser

    parser = _SSEParser(ResponseLimits().max_event_bytes)
    parser.feed(b"data: ")
    chunk = b"x" * 65536

    def feed_until_refused() -> None:
        for _ in range(2000):
            parser.feed(chunk)

    with pytest.raises(ValueError, match="larger than"):
        feed_until_refused()


async def test_the_default_limits_accept_the_contracts_largest_answers() -> None:
    """64 MiB is the contract's per-Session event buffer; bodies get the same room."""
    assert ResponseLimits().max_body_bytes == ResponseLimits().max_event_bytes == 64 * 2**20


# Lenient event types, and strict handling of the rest


async def test_events_with_only_what_the_contract_guarantees_parse(
    kind: str, opened: list[AnyClient]
) -> None:
    turn_only_ids = {
        "type": "agent.session.turn.completed",
        "event_id": "evt_1",
        "session_id": "se_1",
        "turn_id": "tu_1",
    }
    message = copy.deepcopy(EVENTS["item_done_assistant"])
    message["item"]["status"] = None
    message["item"]["content"].append({"type": "refusal_v2", "refusal": "no"})
    completed = copy.deepcopy(EVENTS["turn_created"])
    completed["type"] = "agent.session.turn.completed"
    completed["usage"] = {
        "input_tokens": 3,
        "input_tokens_details": None,
        "output_tokens": 4,
        "output_tokens_details": None,
        "total_tokens": 7,
    }
    frames = sse(turn_only_ids, message, completed)
    with hostile.serving(hostile.event_stream(frames)) as server:
        client = make(kind, server.url)
        opened.append(client)
        stream = await resolve(client.sessions.events.stream("se_1"))
        first, second, third = [await next_event(stream) for _ in range(3)]
        await close(stream)
    assert isinstance(first, TurnCompletedEvent)
    assert first.turn is None
    assert first.status == "completed"
    assert isinstance(second, ItemDoneEvent)
    assert second.item.status is None  # type: ignore[union-attr]
    assert isinstance(third, TurnCompletedEvent)
    assert third.usage is not None
    assert third.usage.input_tokens_details is None


async def test_an_invalid_event_is_a_validation_error_that_closes_the_stream(
    kind: str, opened: list[AnyClient]
) -> None:
    """Before, a raw ``pydantic.ValidationError`` escaped and the stream stayed open."""
    broken = copy.deepcopy(EVENTS["item_done_assistant"])
    del broken["output_index"]
    frames = sse(broken, EVENTS["session_created"])
    with hostile.serving(hostile.event_stream(frames)) as server:
        client = make(kind, server.url)
        opened.append(client)
        stream = await resolve(client.sessions.events.stream("se_1"))
        with pytest.raises(APIResponseValidationError, match="output_index") as caught:
            await next_event(stream)
        with pytest.raises(Exhausted):
            await next_event(stream)
    assert caught.value.body == broken


async def test_frames_without_data_are_ignored(kind: str, opened: list[AnyClient]) -> None:
    """``retry:``, ``id:`` and ``event:`` alone dispatch nothing (the SSE rules); the
    stream used to die with "frame is not JSON"."""
    frames = "retry: 3000\n\n" + "id: 42\n\n" + "event: ping\n\n" + ": keepalive\n\n"
    frames_bytes = frames.encode() + sse(EVENTS["session_created"])
    with hostile.serving(hostile.event_stream(frames_bytes)) as server:
        client = make(kind, server.url)
        opened.append(client)
        stream = await resolve(client.sessions.events.stream("se_1"))
        event = await next_event(stream)
        await close(stream)
    assert isinstance(event, SessionCreatedEvent)


async def test_crlf_and_cr_line_endings_frame_events(kind: str, opened: list[AnyClient]) -> None:
    data = json.dumps(EVENTS["session_created"])
    frames = f"event: x\r\ndata: {data}\r\n\r\ndata: {data}\r\r\n".encode()
    with hostile.serving(hostile.event_stream(frames)) as server:
        client = make(kind, server.url)
        opened.append(client)
        stream = await resolve(client.sessions.events.stream("se_1"))
        events = [await next_event(stream) for _ in range(2)]
        await close(stream)
    assert all(isinstance(event, SessionCreatedEvent) for event in events)


# Deeply nested JSON


async def test_deep_json_in_a_success_body_is_a_validation_error(
    kind: str, opened: list[AnyClient]
) -> None:
    with hostile.serving(hostile.answer(200, hostile.nested(100_000))) as server:
        client = make(kind, server.url)
        opened.append(client)
        with pytest.raises(APIResponseValidationError, match="nested"):
            await resolve(client.sessions.retrieve("se_1"))


async def test_deep_json_in_an_event_is_a_validation_error(
    kind: str, opened: list[AnyClient]
) -> None:
    frames = b"data: " + hostile.nested(100_000) + b"\n\n"
    with hostile.serving(hostile.event_stream(frames)) as server:
        client = make(kind, server.url)
        opened.append(client)
        stream = await resolve(client.sessions.events.stream("se_1"))
        with pytest.raises(APIResponseValidationError, match="nested"):
            await next_event(stream)


async def test_deep_json_in_an_error_body_still_gives_the_status_error(
    kind: str, opened: list[AnyClient]
) -> None:
    """The 500 used to surface as a raw ``RecursionError`` and was not retried."""
    with hostile.serving(hostile.answer(500, hostile.nested(100_000))) as server:
        client = make(kind, server.url, max_retries=1)
        opened.append(client)
        with pytest.raises(InternalServerError) as caught:
            await resolve(client.sessions.retrieve("se_1"))
    assert len(server.requests) == 2
    assert isinstance(caught.value.body, str)


async def test_measuring_depth_takes_linear_time_on_unterminated_strings(
    kind: str, opened: list[AnyClient]
) -> None:
    """Many brackets, then a string that never ends and is full of escaped quotes: a
    scan that restarts at every quote takes minutes here (quadratic), a linear one
    milliseconds. The suite's 120 s timeout is the bound, so load cannot flake it."""
    body = b"[" * 300 + b'"' + b'\\"' * 300_000
    with hostile.serving(hostile.answer(200, body)) as server:
        client = make(kind, server.url)
        opened.append(client)
        with pytest.raises(APIResponseValidationError, match="nested 300 deep"):
            await resolve(client.sessions.retrieve("se_1"))


async def test_json_within_the_depth_limit_parses(kind: str, opened: list[AnyClient]) -> None:
    session = {**copy.deepcopy(SESSION), "metadata": {"deep": "[" * 5000}}
    with hostile.serving(hostile.answer(200, session)) as server:
        client = make(kind, server.url)
        opened.append(client)
        result = await resolve(client.sessions.retrieve("se_1"))
    assert result.metadata == {"deep": "[" * 5000}


# Ids that would change the route


@pytest.mark.parametrize("bad", [".", "..", "", "a/b", "../agents"])
async def test_ids_that_are_not_one_segment_are_refused_before_sending(
    kind: str, bad: str, opened: list[AnyClient]
) -> None:
    """``sessions.delete("..")`` used to send ``DELETE /v1/agents/``."""
    with hostile.serving(hostile.answer(200, {})) as server:
        client = make(kind, server.url)
        opened.append(client)
        for call in (
            lambda: client.sessions.delete(bad),
            lambda: client.agents.retrieve(bad),
            lambda: client.sessions.turns.retrieve(bad, session_id="se_1"),
            lambda: client.sessions.events.create(bad, events=[{"type": "x"}]),
        ):
            with pytest.raises(ValueError, match="`"):
                await resolve(call())
    assert server.requests == []


async def test_other_ids_are_percent_encoded(kind: str, opened: list[AnyClient]) -> None:
    with hostile.serving(hostile.answer(200, SESSION)) as server:
        client = make(kind, server.url)
        opened.append(client)
        await resolve(client.sessions.retrieve("a b?c#d%e.."))
    assert server.requests[0].path == "/v1/agents/sessions/a%20b%3Fc%23d%25e.."


# Which POSTs are retried


async def test_agent_creation_answered_503_is_not_retried(
    kind: str, opened: list[AnyClient]
) -> None:
    """The route takes no Idempotency-Key: a retry after a lost answer could create a
    second Agent, and a key the server ignores protects nothing."""
    handler = hostile.answer(
        503, {"error": {"type": "x", "code": "execution_unavailable", "message": "m"}}
    )
    with hostile.serving(handler) as server:
        client = make(kind, server.url)
        opened.append(client)
        with pytest.raises(ServiceUnavailableError):
            await resolve(client.agents.create(model="m"))
    assert len(server.requests) == 1
    assert "idempotency-key" not in server.requests[0].headers


@pytest.mark.parametrize(
    ("status", "code"),
    [(503, "sandbox_reset_in_progress"), (503, "authentication_unavailable"), (429, None)],
)
async def test_agent_creation_refused_before_admission_is_retried(
    kind: str, status: int, code: str | None, opened: list[AnyClient]
) -> None:
    handler = hostile.answer(status, {"error": {"type": "x", "code": code, "message": "m"}})
    with hostile.serving(handler) as server:
        client = make(kind, server.url, max_retries=2)
        opened.append(client)
        with pytest.raises(OpenAgentCoreError):
            await resolve(client.agents.create(model="m"))
    assert len(server.requests) == 3


async def test_session_creation_and_events_keep_their_keys_and_retries(
    kind: str, opened: list[AnyClient]
) -> None:
    handler = hostile.answer(
        503, {"error": {"type": "x", "code": "execution_unavailable", "message": "m"}}
    )
    with hostile.serving(handler) as server:
        client = make(kind, server.url, max_retries=1)
        opened.append(client)
        with pytest.raises(ServiceUnavailableError):
            await resolve(client.sessions.create(agent_id="ag_1"))
        with pytest.raises(ServiceUnavailableError):
            await resolve(client.sessions.events.create("se_1", events=[{"type": "x"}]))
    keys = [request.headers.get("idempotency-key") for request in server.requests]
    assert len(keys) == 4
    assert keys[0] == keys[1]
    assert keys[2] == keys[3]
    assert keys[0] != keys[2]
    assert all(key and key.startswith("oac-") for key in keys)


async def test_a_post_whose_connection_never_opened_is_retried(
    kind: str, opened: list[AnyClient], unused_port: int
) -> None:
    """Nothing was sent, so nothing can have been admitted: safe to retry any POST."""
    from openagentcore import RetryPolicy

    policy = RetryPolicy(max_retries=2, initial_delay=0.0, max_delay=0.0)
    client = make(kind, f"http://127.0.0.1:{unused_port}/v1", retry_policy=policy)
    opened.append(client)
    attempts: list[str] = []
    transport = client._transport
    original = transport._send_once

    def counting(request: httpx.Request, **kw: Any) -> Any:
        attempts.append(request.method)
        return original(request, **kw)

    transport._send_once = counting  # type: ignore[method-assign]
    with pytest.raises(APIConnectionError):
        await resolve(client.agents.create(model="m"))
    assert len(attempts) == 3


# Configuration


@pytest.mark.parametrize("key", ["sk-abc\n", " sk-abc", "sk-äbc", "sk-a\x00bc", "sk a"])
async def test_an_api_key_that_cannot_be_a_header_is_refused_at_construction(
    kind: str, key: str
) -> None:
    cls = Client if kind == "sync" else AsyncClient
    with pytest.raises(OpenAgentCoreError, match="API key") as caught:
        cls(api_key=key, base_url="http://127.0.0.1:1/v1")
    assert key.strip() not in str(caught.value)


async def test_a_base_url_without_v1_gets_a_hint(kind: str, opened: list[AnyClient]) -> None:
    envelope = {
        "error": {
            "type": "invalid_request_error",
            "code": "unsupported_operation",
            "message": "Unknown operation.",
        }
    }
    with hostile.serving(hostile.answer(404, envelope)) as server:
        client = make(kind, server.url.removesuffix("/v1"))
        opened.append(client)
        with pytest.raises(NotFoundError) as caught:
            await resolve(client.sessions.retrieve("se_1"))
    assert f"did you mean 'http://127.0.0.1:{server.port}/v1'" in str(caught.value)


async def test_a_refused_connection_names_host_and_port(
    kind: str, opened: list[AnyClient], unused_port: int
) -> None:
    client = make(kind, f"http://127.0.0.1:{unused_port}/v1", max_retries=0)
    opened.append(client)
    with pytest.raises(APIConnectionError) as caught:
        await resolve(client.sessions.retrieve("se_1"))
    assert f"127.0.0.1:{unused_port}" in str(caught.value)


async def test_user_info_in_the_base_url_is_not_shown(kind: str, opened: list[AnyClient]) -> None:
    client = make(kind, "https://alice:hunter2@api.test/v1")
    opened.append(client)
    assert "hunter2" not in repr(client)
    assert "alice" not in repr(client)
    assert "api.test/v1" in repr(client)


@pytest.fixture
def unused_port() -> AsyncIterator[int]:
    """A port bound to nobody listening; kept bound so nobody else takes it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def _gzip_json(payload: Any) -> bytes:
    return gzip.compress(json.dumps(payload).encode())


async def test_a_gzipped_answer_within_the_cap_still_parses(
    kind: str, opened: list[AnyClient]
) -> None:
    handler = hostile.answer(200, _gzip_json(SESSION), {"Content-Encoding": "gzip"})
    with hostile.serving(handler) as server:
        client = make(kind, server.url)
        opened.append(client)
        session = await resolve(client.sessions.retrieve("se_1"))
    assert session.id == SESSION["id"]
