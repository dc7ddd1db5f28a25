"""Retries: what is retried, how long each wait is, and that a POST repeats its key."""

from __future__ import annotations

import email.utils
import random
import time

import httpx
import pytest
import respx

from openagentcore import AsyncClient, Client
from openagentcore._errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    BadRequestError,
    ConflictError,
    ServiceUnavailableError,
)

from ._support import API_KEY, BASE_URL, AnyClient, corpus, resolve

pytestmark = pytest.mark.anyio

AGENT = corpus("agents")["minimal"]
SESSION = corpus("sessions")["idle_new"]


def unavailable(**headers: str) -> httpx.Response:
    envelope = {
        "error": {"type": "server_error", "code": "execution_unavailable", "message": "busy"}
    }
    return httpx.Response(503, json=envelope, headers=headers)


@pytest.fixture
def highest_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Full jitter always picks its ceiling, so backoff waits are exact."""
    monkeypatch.setattr(random, "uniform", lambda low, high: high)


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503, 504])
async def test_retryable_status_is_retried_until_success(
    client: AnyClient, api: respx.MockRouter, status: int
) -> None:
    route = api.get("agents/ag_1").mock(
        side_effect=[
            httpx.Response(status),
            httpx.Response(status),
            httpx.Response(200, json=AGENT),
        ]
    )

    agent = await resolve(client.agents.retrieve("ag_1"))

    assert agent.id == AGENT["id"]
    assert route.call_count == 3


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, None), (401, None), (403, None), (404, None), (409, "conflict_error"), (422, None)],
)
async def test_client_errors_are_never_retried(
    client: AnyClient, api: respx.MockRouter, sleeps: list[float], status: int, code: str | None
) -> None:
    route = api.get("agents/ag_1").respond(
        status, json={"error": {"type": "invalid_request_error", "code": code, "message": "no"}}
    )

    with pytest.raises(APIStatusError) as caught:
        await resolve(client.agents.retrieve("ag_1"))

    assert caught.value.status_code == status
    assert route.call_count == 1
    assert sleeps == []


async def test_conflict_and_bad_request_on_post_are_not_retried(
    client: AnyClient, api: respx.MockRouter
) -> None:
    route = api.post("agents/sessions").mock(
        side_effect=[httpx.Response(409), httpx.Response(400), httpx.Response(200, json=SESSION)]
    )

    with pytest.raises(ConflictError):
        await resolve(client.sessions.create(agent_id="ag_1"))
    with pytest.raises(BadRequestError):
        await resolve(client.sessions.create(agent_id="ag_1"))
    assert route.call_count == 2


async def test_retries_give_up_with_the_last_error(
    client: AnyClient, api: respx.MockRouter
) -> None:
    route = api.get("agents/ag_1").mock(return_value=unavailable())

    with pytest.raises(ServiceUnavailableError) as caught:
        await resolve(client.agents.retrieve("ag_1"))

    assert caught.value.code == "execution_unavailable"
    assert route.call_count == 3, "max_retries=2 means three attempts"


async def test_max_retries_zero_makes_one_attempt(
    no_retry_client: AnyClient, api: respx.MockRouter, sleeps: list[float]
) -> None:
    route = api.get("agents/ag_1").mock(return_value=unavailable())

    with pytest.raises(ServiceUnavailableError):
        await resolve(no_retry_client.agents.retrieve("ag_1"))

    assert route.call_count == 1
    assert sleeps == []


@pytest.mark.parametrize("max_retries", [1, 4])
async def test_max_retries_counts_retries(
    api: respx.MockRouter, sleeps: list[float], max_retries: int
) -> None:
    route = api.get("agents/ag_1").mock(return_value=unavailable())
    with (
        Client(api_key=API_KEY, base_url=BASE_URL, max_retries=max_retries) as sync_client,
        pytest.raises(ServiceUnavailableError),
    ):
        sync_client.agents.retrieve("ag_1")
    async with AsyncClient(api_key=API_KEY, base_url=BASE_URL, max_retries=max_retries) as ac:
        with pytest.raises(ServiceUnavailableError):
            await ac.agents.retrieve("ag_1")

    assert route.call_count == 2 * (max_retries + 1)
    assert len(sleeps) == 2 * max_retries


async def test_post_retries_reuse_one_idempotency_key(
    client: AnyClient, api: respx.MockRouter
) -> None:
    route = api.post("agents/sessions/se_1/events").mock(
        side_effect=[unavailable(), httpx.ConnectError("reset"), httpx.Response(202)]
    )

    await resolve(
        client.sessions.events.create("se_1", events=[{"type": "agent.session.input.cancel"}])
    )

    keys = {call.request.headers["Idempotency-Key"] for call in route.calls}
    bodies = {call.request.content for call in route.calls}
    assert route.call_count == 3
    assert len(keys) == 1
    assert len(bodies) == 1


async def test_caller_idempotency_key_is_reused_on_retries(
    client: AnyClient, api: respx.MockRouter
) -> None:
    route = api.post("agents/sessions").mock(
        side_effect=[unavailable(), unavailable(), httpx.Response(200, json=SESSION)]
    )

    await resolve(client.sessions.create(agent_id="ag_1", idempotency_key="create-for-A-1001"))

    assert [c.request.headers["Idempotency-Key"] for c in route.calls] == ["create-for-A-1001"] * 3


async def test_retry_after_seconds_is_honoured(
    client: AnyClient, api: respx.MockRouter, sleeps: list[float]
) -> None:
    api.get("agents/ag_1").mock(
        side_effect=[
            unavailable(**{"Retry-After": "3"}),
            unavailable(**{"Retry-After": "0.25"}),
            httpx.Response(200, json=AGENT),
        ]
    )

    await resolve(client.agents.retrieve("ag_1"))

    assert sleeps == [3.0, 0.25]


async def test_retry_after_ms_wins_over_retry_after(
    client: AnyClient, api: respx.MockRouter, sleeps: list[float]
) -> None:
    api.get("agents/ag_1").mock(
        side_effect=[
            httpx.Response(429, headers={"retry-after-ms": "1500", "Retry-After": "9"}),
            httpx.Response(200, json=AGENT),
        ]
    )

    await resolve(client.agents.retrieve("ag_1"))

    assert sleeps == [1.5]


async def test_retry_after_http_date_is_honoured(
    client: AnyClient, api: respx.MockRouter, sleeps: list[float]
) -> None:
    in_ten_seconds = email.utils.formatdate(time.time() + 10, usegmt=True)
    api.get("agents/ag_1").mock(
        side_effect=[
            unavailable(**{"Retry-After": in_ten_seconds}),
            httpx.Response(200, json=AGENT),
        ]
    )

    await resolve(client.agents.retrieve("ag_1"))

    (wait,) = sleeps
    assert 8.0 < wait <= 10.0


async def test_retry_after_is_capped(
    client: AnyClient, api: respx.MockRouter, sleeps: list[float]
) -> None:
    api.get("agents/ag_1").mock(
        side_effect=[unavailable(**{"Retry-After": "86400"}), httpx.Response(200, json=AGENT)]
    )

    await resolve(client.agents.retrieve("ag_1"))

    assert sleeps == [60.0]


@pytest.mark.usefixtures("highest_jitter")
@pytest.mark.parametrize("hint", [{}, {"Retry-After": "soon"}, {"Retry-After": "-4"}])
async def test_without_a_usable_hint_backoff_doubles(
    api: respx.MockRouter, sleeps: list[float], hint: dict[str, str]
) -> None:
    api.get("agents/ag_1").mock(return_value=unavailable(**hint))
    with (
        Client(api_key=API_KEY, base_url=BASE_URL, max_retries=6) as sync_client,
        pytest.raises(ServiceUnavailableError),
    ):
        sync_client.agents.retrieve("ag_1")

    assert sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]


async def test_backoff_is_jittered_below_its_ceiling(
    api: respx.MockRouter, sleeps: list[float]
) -> None:
    api.get("agents/ag_1").mock(return_value=unavailable())
    async with AsyncClient(api_key=API_KEY, base_url=BASE_URL, max_retries=4) as async_client:
        with pytest.raises(ServiceUnavailableError):
            await async_client.agents.retrieve("ag_1")

    ceilings = [0.5, 1.0, 2.0, 4.0]
    assert len(sleeps) == len(ceilings)
    assert all(0 <= wait <= ceiling for wait, ceiling in zip(sleeps, ceilings, strict=True))


async def test_connection_errors_are_retried_then_raised(
    client: AnyClient, api: respx.MockRouter
) -> None:
    route = api.post("agents/sessions").mock(side_effect=httpx.ConnectError("refused"))

    with pytest.raises(APIConnectionError) as caught:
        await resolve(client.sessions.create(agent_id="ag_1"))

    assert type(caught.value) is APIConnectionError
    assert (
        caught.value.message == "Connection error: ConnectError talking to api.test:443 (refused)"
    )
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert route.call_count == 3


async def test_connection_error_then_success(client: AnyClient, api: respx.MockRouter) -> None:
    route = api.get("agents/ag_1").mock(
        side_effect=[httpx.RemoteProtocolError("eof"), httpx.Response(200, json=AGENT)]
    )

    agent = await resolve(client.agents.retrieve("ag_1"))

    assert agent.id == AGENT["id"]
    assert route.call_count == 2


@pytest.mark.parametrize("timeout", [httpx.ConnectTimeout, httpx.ReadTimeout, httpx.PoolTimeout])
async def test_timeouts_are_retried_then_raised_as_timeouts(
    client: AnyClient, api: respx.MockRouter, timeout: type[httpx.TimeoutException]
) -> None:
    route = api.get("agents/ag_1").mock(side_effect=timeout("slow"))

    with pytest.raises(APITimeoutError, match="Request timed out"):
        await resolve(client.agents.retrieve("ag_1"))

    assert route.call_count == 3


async def test_retries_are_logged_without_the_request_details(
    client: AnyClient, api: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    api.get("agents/ag_1").mock(
        side_effect=[unavailable(**{"Retry-After": "2"}), httpx.Response(200, json=AGENT)]
    )

    with caplog.at_level("INFO", logger="openagentcore"):
        await resolve(client.agents.retrieve("ag_1"))

    retry_lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Retrying")]
    assert retry_lines == [
        "Retrying GET /v1/agents/ag_1 in 2.00s after HTTP 503 (execution_unavailable)"
    ]
