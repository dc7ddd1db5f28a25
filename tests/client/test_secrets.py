"""The API key never shows in a repr, an exception or a log line."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable

import httpx
import pytest
import respx

from openagentcore._errors import APIError

from ._support import API_KEY, AnyClient, collect, corpus, resolve, sse_response

pytestmark = pytest.mark.anyio

AGENT = corpus("agents")["minimal"]
EVENTS = corpus("events")


def assert_no_key(text: str) -> None:
    assert API_KEY not in text
    assert API_KEY[-8:] not in text, "not even a suffix of the key"


async def test_client_repr_shows_the_url_only(client: AnyClient) -> None:
    for text in (repr(client), str(client), repr(client._transport)):
        assert_no_key(text)
        assert "https://api.test/v1/" in text


ANSWERS: dict[str, Callable[[], httpx.Response]] = {
    "401": lambda: httpx.Response(
        401,
        json={"error": {"type": "authentication_error", "code": None, "message": "bad key"}},
        headers={"x-request-id": "req_1"},
    ),
    "409": lambda: httpx.Response(409, json={"error": {"code": "idempotency_conflict"}}),
    "503": lambda: httpx.Response(503, text="busy"),
    "malformed 200": lambda: httpx.Response(200, json={"id": 1}),
}
FAILURES: dict[str, Exception] = {
    "connection": httpx.ConnectError("refused"),
    "timeout": httpx.ReadTimeout("slow"),
}


@pytest.mark.parametrize(
    "outcome", [*ANSWERS.values(), *FAILURES.values()], ids=[*ANSWERS, *FAILURES]
)
async def test_raised_errors_do_not_contain_the_key(
    client: AnyClient, api: respx.MockRouter, outcome: Callable[[], httpx.Response] | Exception
) -> None:
    route = api.post("agents/sessions")
    if isinstance(outcome, Exception):
        route.mock(side_effect=outcome)
    else:
        route.mock(side_effect=lambda request: outcome())

    with pytest.raises(APIError) as caught:
        await resolve(client.sessions.create(agent_id="ag_1"))

    assert_no_key(str(caught.value))
    assert_no_key(repr(caught.value))
    assert_no_key("".join(traceback.format_exception(caught.value)))


async def test_stream_errors_do_not_contain_the_key(
    client: AnyClient, api: respx.MockRouter
) -> None:
    api.get("agents/sessions/se_1/events").mock(
        return_value=sse_response([EVENTS["error_stream_interrupted"]])
    )
    stream = await resolve(client.sessions.events.stream("se_1"))

    with pytest.raises(APIError) as caught:
        await collect(stream)

    assert stream.response.is_closed
    assert_no_key(str(caught.value))
    assert_no_key(repr(caught.value))


async def test_debug_logs_of_requests_and_retries_do_not_contain_the_key(
    client: AnyClient, api: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    api.get("agents/ag_1").mock(
        side_effect=[
            httpx.ConnectError("refused"),
            httpx.Response(503, headers={"x-request-id": "req_7"}),
            httpx.Response(200, json=AGENT, headers={"x-request-id": "req_8"}),
        ]
    )
    api.post("agents/sessions").respond(401)

    with caplog.at_level(logging.DEBUG):
        await resolve(client.agents.retrieve("ag_1"))
        with pytest.raises(APIError):
            await resolve(client.sessions.create(agent_id="ag_1"))

    messages = [record.getMessage() for record in caplog.records]
    assert "GET /v1/agents/ag_1 -> 200 (request id req_8)" in messages, "logs were captured"
    assert sum(message.startswith("Retrying GET") for message in messages) == 2
    for record in caplog.records:
        assert_no_key(record.getMessage())
        assert_no_key(repr(record.args))
    assert_no_key(caplog.text)
