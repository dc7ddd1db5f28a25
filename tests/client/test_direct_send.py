"""The SDK's own HTTP clients send through their transports directly, past
``httpx.Client.build_request`` and ``send``: what those did must still happen.

A request built directly must be the one ``build_request`` builds (URL, headers in
order, cookies, body, timeout); a response must still leave its cookies in the jar,
record ``elapsed`` and be logged on httpx's logger; a closed client must refuse to
send. A client passed in keeps going through httpx, with its auth, hooks and cookies.
"""

from __future__ import annotations

import logging
from typing import Any
from unittest import mock

import httpx
import pytest
import respx
from hypothesis import given
from hypothesis import strategies as st

from openagentcore import AsyncClient, Client, RedirectError
from openagentcore._base_client import RequestOptions

from ._support import API_KEY, BASE_URL, AnyClient, corpus, resolve

pytestmark = pytest.mark.anyio

SESSION = corpus("sessions")["idle_new"]

# -- the request built directly is the one build_request builds -----------------------

header_names = st.sampled_from(
    ["X-Trace", "x-trace", "Accept", "accept", "Idempotency-Key", "idempotency-key", "User-Agent"]
)
header_maps = st.dictionaries(header_names, st.sampled_from(["a", "b c", "1"]), max_size=3)
json_values = st.dictionaries(st.sampled_from(["x", "y", "é"]), st.integers() | st.text(max_size=3))


@st.composite
def request_options(draw: st.DrawFn) -> RequestOptions:
    method = draw(st.sampled_from(["GET", "POST", "DELETE"]))
    has_body = method == "POST" and draw(st.booleans())
    return RequestOptions(
        method,
        draw(st.sampled_from(["agents", "agents/sessions/se_1/events", "/agents/a%2Fb"])),
        params=draw(
            st.none()
            | st.dictionaries(st.sampled_from(["limit", "after"]), st.none() | st.integers())
        ),
        body=draw(json_values) if has_body else None,
        has_body=has_body,
        idempotency_key=draw(st.none() | st.sampled_from(["key-1", "oac-given"])),
        stream=draw(st.booleans()),
        keyed=draw(st.booleans()),
        timeout=draw(st.none() | st.sampled_from([3.0, httpx.Timeout(7.0, read=9.0)])),
        extra_headers=draw(st.none() | header_maps),
        extra_query=draw(
            st.none() | st.dictionaries(st.sampled_from(["q", "limit"]), st.text(max_size=3))
        ),
        extra_body=draw(st.none() | json_values) if has_body else None,
    )


def _as_sent(request: httpx.Request) -> tuple[Any, ...]:
    return (
        request.method,
        str(request.url),
        request.headers.raw,
        request.read(),
        request.extensions,
    )


@given(options=request_options(), default_headers=header_maps, cookie=st.booleans())
def test_a_direct_request_is_the_one_build_request_builds(
    options: RequestOptions, default_headers: dict[str, str], cookie: bool
) -> None:
    with Client(api_key=API_KEY, base_url=BASE_URL) as original:
        client = original.with_options(default_headers=default_headers)
        transport = client._transport
        assert transport._direct is not None, "the SDK's own client sends directly"
        if cookie:
            transport._http.cookies.set("lb", "node-2", domain="api.test")
        with mock.patch("openagentcore._base_client.new_idempotency_key", return_value="oac-fixed"):
            direct = transport._new_request(options, transport._http, direct=True)
            built = transport._new_request(options, transport._http, direct=False)
    assert _as_sent(direct) == _as_sent(built)


# -- what httpx.Client.send did with a response ---------------------------------------


async def test_cookies_a_server_sets_are_sent_back_as_httpx_does(
    client: AnyClient, api: respx.MockRouter
) -> None:
    """Load balancers pin a client to a node with a cookie; the jar is kept."""
    route = api.get("agents/sessions/se_1").mock(
        side_effect=[
            httpx.Response(200, json=SESSION, headers={"Set-Cookie": "lb=node-2; Path=/"}),
            httpx.Response(200, json=SESSION),
        ]
    )
    await resolve(client.sessions.retrieve("se_1"))
    await resolve(client.sessions.retrieve("se_1"))
    assert "cookie" not in route.calls[0].request.headers
    assert route.calls[1].request.headers["cookie"] == "lb=node-2"


async def test_a_response_records_its_elapsed_time(
    client: AnyClient, api: respx.MockRouter
) -> None:
    api.get("agents/sessions/se_1").respond(200, json=SESSION)
    if isinstance(client, Client):
        raw = client.with_raw_response(lambda c: c.sessions.retrieve("se_1"))
    else:
        raw = await client.with_raw_response(lambda c: c.sessions.retrieve("se_1"))
    assert raw.response.elapsed.total_seconds() >= 0


async def test_requests_are_logged_on_httpx_logger(
    client: AnyClient, api: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    api.get("agents/sessions/se_1").respond(200, json=SESSION)
    with caplog.at_level(logging.INFO, logger="httpx"):
        await resolve(client.sessions.retrieve("se_1"))
    lines = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert lines == [f'HTTP Request: GET {BASE_URL}/agents/sessions/se_1 "HTTP/1.1 200 OK"']
    assert API_KEY not in caplog.text


async def test_a_closed_client_refuses_to_send(api: respx.MockRouter) -> None:
    api.get("agents/sessions/se_1").respond(200, json=SESSION)
    sync_client = Client(api_key=API_KEY, base_url=BASE_URL)
    sync_client.close()
    with pytest.raises(RuntimeError, match="client has been closed"):
        sync_client.sessions.retrieve("se_1")
    async_client = AsyncClient(api_key=API_KEY, base_url=BASE_URL)
    await async_client.close()
    with pytest.raises(RuntimeError, match="client has been closed"):
        await async_client.sessions.retrieve("se_1")


async def test_a_redirect_to_a_malformed_location_is_a_redirect_error(
    client: AnyClient, api: respx.MockRouter, sleeps: list[float]
) -> None:
    """httpx's client parsed the Location to offer ``next_request`` and raised a
    protocol error for a malformed one, which was retried as a connection error; a
    redirect is an error that is never retried, whatever its Location."""
    route = api.get("agents/sessions/se_1").respond(302, headers={"Location": "http://[::1"})
    with pytest.raises(RedirectError) as caught:
        await resolve(client.sessions.retrieve("se_1"))
    assert caught.value.status_code == 302
    assert route.call_count == 1
    assert sleeps == []


# -- a client passed in goes through httpx --------------------------------------------


class _StampAuth(httpx.Auth):
    def auth_flow(self, request: httpx.Request) -> Any:
        request.headers["X-Stamp"] = "signed"
        yield request


def _assert_sent_through_httpx(route: respx.Route) -> None:
    request = route.calls.last.request
    assert request.headers["X-Stamp"] == "signed"
    assert request.headers["cookie"] == "tenant=t1"
    assert request.headers["Authorization"] == f"Bearer {API_KEY}"


def test_a_given_client_keeps_its_auth_hooks_and_cookies(api: respx.MockRouter) -> None:
    route = api.get("agents/sessions/se_1").respond(200, json=SESSION)
    seen: list[str] = []
    given = httpx.Client(
        auth=_StampAuth(),
        cookies={"tenant": "t1"},
        event_hooks={"request": [lambda request: seen.append(request.url.path)]},
    )
    with Client(api_key=API_KEY, base_url=BASE_URL, http_client=given) as client:
        assert client._transport._direct is None
        client.sessions.retrieve("se_1")
    given.close()
    _assert_sent_through_httpx(route)
    assert seen == ["/v1/agents/sessions/se_1"]


async def test_a_given_async_client_keeps_its_auth_hooks_and_cookies(
    api: respx.MockRouter,
) -> None:
    route = api.get("agents/sessions/se_1").respond(200, json=SESSION)
    seen: list[str] = []

    async def hook(request: httpx.Request) -> None:
        seen.append(request.url.path)

    given = httpx.AsyncClient(
        auth=_StampAuth(), cookies={"tenant": "t1"}, event_hooks={"request": [hook]}
    )
    async with AsyncClient(api_key=API_KEY, base_url=BASE_URL, http_client=given) as client:
        assert client._transport._direct is None
        await client.sessions.retrieve("se_1")
    await given.aclose()
    _assert_sent_through_httpx(route)
    assert seen == ["/v1/agents/sessions/se_1"]


def test_a_base_url_with_user_info_goes_through_httpx() -> None:
    """httpx turns user info into Basic auth; only its own send path does that."""
    with Client(api_key=API_KEY, base_url="https://user:pw@api.test/v1") as client:
        assert client._transport._direct is None
