"""Session event streams: typed events, keepalives, error frames and closing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import respx

from openagentcore._errors import (
    APIConnectionError,
    APIResponseValidationError,
    NotFoundError,
    StreamError,
)
from openagentcore._streaming import AsyncEventStream, EventStream
from openagentcore.types import (
    ErrorEvent,
    OutputTextDeltaEvent,
    SessionCreatedEvent,
    SessionIdleEvent,
    UnknownEvent,
)

from ._support import AnyClient, close, collect, corpus, resolve, sse, sse_response

pytestmark = pytest.mark.anyio

EVENTS = corpus("events")
ORDINARY = {name: payload for name, payload in EVENTS.items() if name != "error_stream_interrupted"}
UNKNOWN = corpus("unknown_types")["event_type"]["payload"]
KEEPALIVE = ": keepalive\n\n"
STREAM_ROUTE = "agents/sessions/se_1/events"


#: Bugs with a fix ready that waits on an uncommitted edit to _streaming.py by another
#: engineer; strict, so the marker must go once the fix lands.
async def open_stream(client: AnyClient) -> EventStream | AsyncEventStream:
    stream: EventStream | AsyncEventStream = await resolve(client.sessions.events.stream("se_1"))
    return stream


async def next_event(stream: EventStream | AsyncEventStream) -> Any:
    if isinstance(stream, AsyncEventStream):
        return await stream.__anext__()
    return next(stream)


async def test_stream_request_asks_for_an_event_stream(
    client: AnyClient, api: respx.MockRouter
) -> None:
    route = api.get(STREAM_ROUTE).mock(return_value=sse_response([]))

    stream = await open_stream(client)
    await close(stream)

    request = route.calls.last.request
    assert request.headers["Accept"] == "text/event-stream"
    assert request.headers["OpenAI-Beta"] == "agents=v1"
    assert "Idempotency-Key" not in request.headers
    assert request.extensions["timeout"]["read"] == 45.0


async def test_every_corpus_event_arrives_typed_and_in_order(
    client: AnyClient, api: respx.MockRouter
) -> None:
    api.get(STREAM_ROUTE).mock(return_value=sse_response(ORDINARY.values()))

    events = await collect(await open_stream(client))

    assert [event.type for event in events] == [p["type"] for p in ORDINARY.values()]
    assert not [event for event in events if isinstance(event, UnknownEvent)]
    assert [event.event_id for event in events] == [p["event_id"] for p in ORDINARY.values()]
    by_name = dict(zip(ORDINARY, events, strict=True))
    assert isinstance(by_name["session_created"], SessionCreatedEvent)
    assert isinstance(by_name["output_text_delta"], OutputTextDeltaEvent)
    assert isinstance(by_name["session_idle"], SessionIdleEvent)


async def test_unknown_event_type_arrives_as_unknown_event(
    client: AnyClient, api: respx.MockRouter
) -> None:
    api.get(STREAM_ROUTE).mock(return_value=sse_response([UNKNOWN, EVENTS["session_idle"]]))

    unknown, idle = await collect(await open_stream(client))

    assert isinstance(unknown, UnknownEvent)
    assert unknown.raw == UNKNOWN
    assert isinstance(idle, SessionIdleEvent)


async def test_keepalive_comments_are_skipped(client: AnyClient, api: respx.MockRouter) -> None:
    frames = [KEEPALIVE, EVENTS["output_text_delta"], KEEPALIVE, KEEPALIVE, EVENTS["session_idle"]]
    api.get(STREAM_ROUTE).mock(return_value=sse_response(frames))

    events = await collect(await open_stream(client))

    assert [type(event) for event in events] == [OutputTextDeltaEvent, SessionIdleEvent]


async def test_session_error_events_are_yielded(client: AnyClient, api: respx.MockRouter) -> None:
    api.get(STREAM_ROUTE).mock(
        return_value=sse_response([EVENTS["error_sandbox"], EVENTS["session_idle"]])
    )

    error, idle = await collect(await open_stream(client))

    assert isinstance(error, ErrorEvent)
    assert error.error.code == "sandbox_error"
    assert isinstance(idle, SessionIdleEvent)


async def test_stream_interrupted_raises_and_closes(
    client: AnyClient, api: respx.MockRouter
) -> None:
    frames = [EVENTS["output_text_delta"], EVENTS["error_stream_interrupted"]]
    api.get(STREAM_ROUTE).mock(return_value=sse_response(frames))
    stream = await open_stream(client)

    first = await next_event(stream)
    with pytest.raises(StreamError) as caught:
        await next_event(stream)

    assert isinstance(first, OutputTextDeltaEvent)
    assert caught.value.code == "stream_interrupted"
    assert caught.value.type == "server_error"
    assert caught.value.message == EVENTS["error_stream_interrupted"]["error"]["message"]
    assert caught.value.request is not None
    assert stream.response.is_closed


async def test_interrupted_error_frame_is_recognised_by_its_data_type(
    client: AnyClient, api: respx.MockRouter
) -> None:
    data = '{"type": "error", "error": {"code": "stream_interrupted"}}'
    api.get(STREAM_ROUTE).mock(return_value=sse_response([f"data: {data}\n\n"]))

    with pytest.raises(StreamError, match="The event stream was interrupted"):
        await collect(await open_stream(client))


async def test_no_event_is_yielded_after_an_interruption(
    client: AnyClient, api: respx.MockRouter
) -> None:
    frames = [EVENTS["error_stream_interrupted"], EVENTS["session_idle"]]
    api.get(STREAM_ROUTE).mock(return_value=sse_response(frames))
    stream = await open_stream(client)
    with pytest.raises(StreamError):
        await next_event(stream)

    assert await collect(stream) == []


async def test_closed_stream_ends_iteration(client: AnyClient, api: respx.MockRouter) -> None:
    api.get(STREAM_ROUTE).mock(return_value=sse_response([EVENTS["session_idle"]]))
    stream = await open_stream(client)

    await close(stream)

    assert await collect(stream) == []


async def test_answer_that_is_not_an_event_stream_is_a_validation_error(
    client: AnyClient, api: respx.MockRouter
) -> None:
    api.get(STREAM_ROUTE).respond(200, json={"id": "se_1"})
    stream = await open_stream(client)

    with pytest.raises(APIResponseValidationError, match="got application/json") as caught:
        await next_event(stream)

    assert "Expected an event stream from GET /v1/agents/sessions/se_1/events" in str(caught.value)
    assert stream.response.is_closed


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        ("event: agent.session.idle\ndata: {not json\n\n", "is not JSON"),
        ("event: agent.session.idle\ndata: [1, 2]\n\n", "is not a JSON object"),
    ],
)
async def test_malformed_frame_is_a_validation_error(
    client: AnyClient, api: respx.MockRouter, frame: str, message: str
) -> None:
    api.get(STREAM_ROUTE).mock(return_value=sse_response([frame]))

    with pytest.raises(APIResponseValidationError, match=message):
        await collect(await open_stream(client))


async def test_stream_ends_when_the_server_closes_it(
    client: AnyClient, api: respx.MockRouter
) -> None:
    api.get(STREAM_ROUTE).mock(return_value=sse_response([EVENTS["session_idle"]]))
    stream = await open_stream(client)

    events = await collect(stream)

    assert len(events) == 1
    assert stream.response.is_closed


async def test_stream_is_a_context_manager(client: AnyClient, api: respx.MockRouter) -> None:
    api.get(STREAM_ROUTE).mock(return_value=sse_response(ORDINARY.values()))
    stream = await open_stream(client)

    entered: EventStream | AsyncEventStream
    if isinstance(stream, AsyncEventStream):
        async with stream as entered_async:
            first = await entered_async.__anext__()
        entered = entered_async
    else:
        with stream as entered_sync:
            first = next(entered_sync)
        entered = entered_sync

    assert entered is stream
    assert isinstance(first, SessionCreatedEvent)
    assert stream.response.is_closed


class _DropsAfterOneFrame(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body that delivers one event, then loses the connection."""

    frame = sse([EVENTS["output_text_delta"]])

    def __iter__(self) -> Iterator[bytes]:
        yield self.frame
        raise httpx.ReadError("connection reset")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.frame
        raise httpx.ReadError("connection reset")


async def test_dropped_connection_raises_connection_error_and_closes(
    client: AnyClient, api: respx.MockRouter
) -> None:
    api.get(STREAM_ROUTE).mock(
        return_value=httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=_DropsAfterOneFrame()
        )
    )
    stream = await open_stream(client)

    first = await next_event(stream)
    with pytest.raises(APIConnectionError, match="ReadError"):
        await next_event(stream)

    assert isinstance(first, OutputTextDeltaEvent)
    assert stream.response.is_closed


async def test_stream_open_errors_raise_like_any_request(
    client: AnyClient, api: respx.MockRouter
) -> None:
    route = api.get(STREAM_ROUTE).respond(
        404, json={"error": {"type": "invalid_request_error", "code": None, "message": "no"}}
    )

    with pytest.raises(NotFoundError):
        await open_stream(client)
    assert route.call_count == 1


async def test_stream_open_is_retried_on_503(client: AnyClient, api: respx.MockRouter) -> None:
    route = api.get(STREAM_ROUTE).mock(
        side_effect=[httpx.Response(503), sse_response([EVENTS["session_idle"]])]
    )

    events = await collect(await open_stream(client))

    assert route.call_count == 2
    assert [type(event) for event in events] == [SessionIdleEvent]


async def test_create_session_with_stream_returns_an_event_stream(
    client: AnyClient, api: respx.MockRouter
) -> None:
    frames = [EVENTS["session_created"], KEEPALIVE, EVENTS["session_idle"]]
    route = api.post("agents/sessions").mock(return_value=sse_response(frames))

    stream = await resolve(client.sessions.create(agent_id="ag_1", input="hi", stream=True))
    events = await collect(stream)

    assert isinstance(stream, (EventStream, AsyncEventStream))
    assert [type(event) for event in events] == [SessionCreatedEvent, SessionIdleEvent]
    request = route.calls.last.request
    assert request.headers["Accept"] == "text/event-stream"
    assert request.headers["Idempotency-Key"].startswith("oac-")
    assert request.read() == (
        b'{"environment":{"type":"none"},"agent_id":"ag_1","input":"hi","stream":true}'
    )


async def test_create_session_with_stream_retries_with_the_same_key(
    client: AnyClient, api: respx.MockRouter
) -> None:
    route = api.post("agents/sessions").mock(
        side_effect=[httpx.Response(502), sse_response([EVENTS["session_created"]])]
    )

    await collect(await resolve(client.sessions.create(agent_id="ag_1", stream=True)))

    first, second = (call.request.headers["Idempotency-Key"] for call in route.calls)
    assert first == second
