"""Construction: explicit arguments, environment fallbacks, base URL forms, ownership."""

from __future__ import annotations

import httpx
import pytest
import respx

from openagentcore import AsyncClient, Client
from openagentcore._errors import OpenAgentCoreError

from ._support import API_KEY, BASE_URL, corpus

pytestmark = pytest.mark.anyio

CLIENTS = pytest.mark.parametrize("client_class", [Client, AsyncClient])
AGENT = corpus("agents")["minimal"]


@CLIENTS
def test_api_key_and_base_url_fall_back_to_the_environment(
    monkeypatch: pytest.MonkeyPatch, client_class: type[Client | AsyncClient]
) -> None:
    monkeypatch.setenv("OPENAGENTCORE_API_KEY", API_KEY)
    monkeypatch.setenv("OPENAGENTCORE_BASE_URL", "https://env.test/v1")

    assert str(client_class().base_url) == "https://env.test/v1/"


async def test_environment_key_is_the_one_sent(
    monkeypatch: pytest.MonkeyPatch, api: respx.MockRouter
) -> None:
    monkeypatch.setenv("OPENAGENTCORE_API_KEY", "sk-from-env")
    monkeypatch.setenv("OPENAGENTCORE_BASE_URL", BASE_URL)
    route = api.get("agents/ag_1").respond(200, json=AGENT)

    with Client() as sync_client:
        sync_client.agents.retrieve("ag_1")
    async with AsyncClient() as async_client:
        await async_client.agents.retrieve("ag_1")

    assert [c.request.headers["Authorization"] for c in route.calls] == ["Bearer sk-from-env"] * 2


async def test_arguments_win_over_the_environment(
    monkeypatch: pytest.MonkeyPatch, api: respx.MockRouter
) -> None:
    monkeypatch.setenv("OPENAGENTCORE_API_KEY", "sk-from-env")
    monkeypatch.setenv("OPENAGENTCORE_BASE_URL", "https://env.test/v1")
    route = api.get("agents/ag_1").respond(200, json=AGENT)

    with Client(api_key=API_KEY, base_url=BASE_URL) as sync_client:
        sync_client.agents.retrieve("ag_1")

    assert route.calls.last.request.headers["Authorization"] == f"Bearer {API_KEY}"


@CLIENTS
@pytest.mark.parametrize("api_key", [None, ""], ids=["unset", "empty"])
def test_missing_api_key_says_how_to_provide_one(
    monkeypatch: pytest.MonkeyPatch, client_class: type[Client | AsyncClient], api_key: str | None
) -> None:
    monkeypatch.setenv("OPENAGENTCORE_BASE_URL", BASE_URL)
    if api_key is not None:
        monkeypatch.setenv("OPENAGENTCORE_API_KEY", api_key)

    with pytest.raises(OpenAgentCoreError, match="pass api_key= or set OPENAGENTCORE_API_KEY"):
        client_class()


@CLIENTS
def test_missing_base_url_says_how_to_provide_one(
    monkeypatch: pytest.MonkeyPatch, client_class: type[Client | AsyncClient]
) -> None:
    monkeypatch.setenv("OPENAGENTCORE_API_KEY", API_KEY)

    with pytest.raises(OpenAgentCoreError, match="pass base_url= or set OPENAGENTCORE_BASE_URL"):
        client_class()


@pytest.mark.parametrize(
    "base_url",
    [BASE_URL, BASE_URL + "/", httpx.URL(BASE_URL)],
    ids=["no trailing slash", "trailing slash", "httpx.URL"],
)
async def test_base_url_with_or_without_trailing_slash_reaches_the_same_route(
    api: respx.MockRouter, base_url: str | httpx.URL
) -> None:
    route = api.get("agents/ag_1").respond(200, json=AGENT)

    with Client(api_key=API_KEY, base_url=base_url) as sync_client:
        sync_client.agents.retrieve("ag_1")
    async with AsyncClient(api_key=API_KEY, base_url=base_url) as async_client:
        await async_client.agents.retrieve("ag_1")

    assert [str(c.request.url) for c in route.calls] == ["https://api.test/v1/agents/ag_1"] * 2


async def test_base_url_path_prefix_is_kept() -> None:
    with respx.mock(base_url="http://gateway.test/proxy/v1") as api:
        route = api.get("agents/ag_1").respond(200, json=AGENT)
        with Client(api_key=API_KEY, base_url="http://gateway.test/proxy/v1") as sync_client:
            sync_client.agents.retrieve("ag_1")

    assert route.calls.last.request.url.path == "/proxy/v1/agents/ag_1"


@CLIENTS
def test_negative_max_retries_is_refused(client_class: type[Client | AsyncClient]) -> None:
    with pytest.raises(ValueError, match="max_retries must be >= 0, got -1"):
        client_class(api_key=API_KEY, base_url=BASE_URL, max_retries=-1)


def test_caller_http_client_is_used_and_left_open(api: respx.MockRouter) -> None:
    route = api.get("agents/ag_1").respond(200, json=AGENT)
    http = httpx.Client(headers={"X-Via": "caller"})

    with Client(api_key=API_KEY, base_url=BASE_URL, http_client=http) as sync_client:
        sync_client.agents.retrieve("ag_1")

    assert route.calls.last.request.headers["X-Via"] == "caller"
    assert not http.is_closed
    http.close()


async def test_caller_async_http_client_is_used_and_left_open(api: respx.MockRouter) -> None:
    route = api.get("agents/ag_1").respond(200, json=AGENT)
    http = httpx.AsyncClient(headers={"X-Via": "caller"})

    async with AsyncClient(api_key=API_KEY, base_url=BASE_URL, http_client=http) as async_client:
        await async_client.agents.retrieve("ag_1")

    assert route.calls.last.request.headers["X-Via"] == "caller"
    assert not http.is_closed
    await http.aclose()


async def test_own_http_client_is_closed_with_the_client() -> None:
    sync_client = Client(api_key=API_KEY, base_url=BASE_URL)
    async_client = AsyncClient(api_key=API_KEY, base_url=BASE_URL)

    sync_client.close()
    await async_client.close()

    assert sync_client._transport._http.is_closed
    assert sync_client._transport._stream_http.is_closed
    assert async_client._transport._http.is_closed
    assert async_client._transport._stream_http.is_closed


async def test_timeout_number_applies_to_requests(api: respx.MockRouter) -> None:
    route = api.get("agents/ag_1").respond(200, json=AGENT)

    with Client(api_key=API_KEY, base_url=BASE_URL, timeout=12.5) as sync_client:
        sync_client.agents.retrieve("ag_1")

    timeout = route.calls.last.request.extensions["timeout"]
    assert timeout == {"connect": 5.0, "read": 12.5, "write": 12.5, "pool": 12.5}
