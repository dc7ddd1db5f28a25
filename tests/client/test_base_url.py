"""Mistakes in ``base_url``: refused when the client is built, or named when the
server's 404 shows the URL reaches no API route."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from openagentcore import (
    AsyncClient,
    Client,
    FunctionRunner,
    MemoryResultStore,
    NotFoundError,
    OpenAgentCoreError,
    RunnerError,
)
from openagentcore.local import LocalCore

from . import _hostile as hostile
from ._support import API_KEY, AnyClient, close, resolve

pytestmark = pytest.mark.anyio

HTML_404 = b"<html><body><h1>404 Not Found</h1><p>nginx</p></body></html>"


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make(kind: str, base_url: str, api_key: str = API_KEY) -> AnyClient:
    cls = Client if kind == "sync" else AsyncClient
    return cls(api_key=api_key, base_url=base_url)


@pytest.fixture(scope="module")
def core() -> Iterator[LocalCore]:
    with LocalCore() as running:
        yield running


def root_of(core: LocalCore) -> str:
    return core.base_url.removesuffix("/v1")


# Refused at construction


@pytest.mark.parametrize(
    ("base_url", "names"),
    [
        ("https://api.example.com/v1?token=s3cr3t-query-value", "query string"),
        ("https://api.example.com/v1?", "query string"),
        ("https://u:pw-s3cr3t@api.example.com/v1?token=s3cr3t-query-value", "query string"),
        ("https://api.example.com/v1#s3cr3t-fragment", "#fragment"),
        ("127.0.0.1:8765/v1", "no scheme"),
        ("localhost:8765/v1", "no scheme"),
        ("api.example.com/v1", "no scheme"),
        ("ftp://api.example.com/v1", "http:// or https://"),
        ("http:///v1", "no host"),
    ],
)
def test_a_base_url_that_would_lose_parts_is_refused_without_echoing_them(
    kind: str, base_url: str, names: str
) -> None:
    cls = Client if kind == "sync" else AsyncClient
    with pytest.raises(OpenAgentCoreError, match=names) as caught:
        cls(api_key=API_KEY, base_url=base_url)
    message = str(caught.value)
    assert "base_url" in message
    assert "s3cr3t" not in message
    assert API_KEY not in message


def test_a_query_in_the_environment_base_url_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAGENTCORE_BASE_URL", "http://127.0.0.1:8765/v1?token=s3cr3t")
    with pytest.raises(OpenAgentCoreError, match="OPENAGENTCORE_BASE_URL") as caught:
        Client(api_key=API_KEY)
    assert "s3cr3t" not in str(caught.value)
    assert "'http://127.0.0.1:8765/v1'" in str(caught.value)


# A 404 that names no API route


async def test_the_emulator_at_its_root_says_base_url_lacks_v1(kind: str, core: LocalCore) -> None:
    client = make(kind, root_of(core), core.api_key)
    try:
        with pytest.raises(NotFoundError) as caught:
            await resolve(client.sessions.retrieve("sesn_missing"))
    finally:
        await close(client)
    error = caught.value
    assert error.route_missing
    assert error.from_api
    assert f"did you mean '{core.base_url}'" in str(error)
    assert "/agents/sessions/sesn_missing" in str(error)


async def test_a_web_server_404_in_html_says_base_url_looks_wrong(kind: str) -> None:
    with hostile.serving(hostile.answer(404, HTML_404)) as server:
        client = make(kind, server.url)
        try:
            with pytest.raises(NotFoundError) as caught:
                await resolve(client.sessions.retrieve("sesn_1"))
        finally:
            await close(client)
    error = caught.value
    assert not error.from_api
    assert error.route_missing
    message = str(error)
    assert "looks wrong" in message
    assert "without the API's error body" in message
    assert f"GET http://127.0.0.1:{server.port}/v1/agents/sessions/sesn_1" in message
    assert API_KEY not in message


async def test_a_real_api_404_is_about_the_resource(kind: str, core: LocalCore) -> None:
    client = make(kind, core.base_url, core.api_key)
    try:
        with pytest.raises(NotFoundError) as caught:
            await resolve(client.sessions.retrieve("sesn_missing"))
    finally:
        await close(client)
    assert caught.value.from_api
    assert not caught.value.route_missing
    assert "looks wrong" not in str(caught.value)


def serve_error(base_url: str, api_key: str) -> RunnerError:
    with Client(api_key=api_key, base_url=base_url, max_retries=0) as client:
        runner = FunctionRunner(client, store=MemoryResultStore())
        try:
            with pytest.raises(RunnerError) as caught:
                runner.serve("sesn_1")
        finally:
            runner.close()
    return caught.value


def test_serving_through_the_emulator_root_names_the_base_url_not_a_deleted_session(
    core: LocalCore,
) -> None:
    message = str(serve_error(root_of(core), core.api_key))
    assert "no longer exists" not in message
    assert f"did you mean '{core.base_url}'" in message


def test_serving_through_a_web_server_that_404s_names_the_base_url() -> None:
    with hostile.serving(hostile.answer(404, HTML_404)) as server:
        message = str(serve_error(server.url, API_KEY))
    assert "no longer exists" not in message
    assert "looks wrong" in message
    assert f"127.0.0.1:{server.port}/v1/agents/sessions" in message


def test_serving_a_deleted_session_still_says_it_no_longer_exists(core: LocalCore) -> None:
    assert "no longer exists" in str(serve_error(core.base_url, core.api_key))
