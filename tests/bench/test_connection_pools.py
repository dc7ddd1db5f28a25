"""A runner serving more than 100 Sessions holds more than 100 event streams open.

httpx's default pool has 100 connections; before streams got their own pool, the
101st stream and every request after it waited for a connection until the timeout.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from openagentcore import AsyncClient, Client
from openagentcore.local import LocalCore

STREAMS = 101


@pytest.fixture(scope="module")
def core() -> Iterator[LocalCore]:
    with LocalCore() as running:
        yield running


def test_requests_go_through_beside_more_than_100_open_streams(core: LocalCore) -> None:
    with Client(base_url=core.base_url, api_key=core.api_key, timeout=5, max_retries=0) as client:
        session = client.sessions.create(agent={"model": "scripted"}, input="Hello.")
        streams = [client.sessions.events.stream(session.id) for _ in range(STREAMS)]
        try:
            assert client.sessions.retrieve(session.id).id == session.id
        finally:
            for stream in streams:
                stream.close()


@pytest.mark.anyio
async def test_async_requests_go_through_beside_more_than_100_open_streams(
    core: LocalCore,
) -> None:
    async with AsyncClient(
        base_url=core.base_url, api_key=core.api_key, timeout=5, max_retries=0
    ) as client:
        session = await client.sessions.create(agent={"model": "scripted"}, input="Hello.")
        streams = [await client.sessions.events.stream(session.id) for _ in range(STREAMS)]
        try:
            assert (await client.sessions.retrieve(session.id)).id == session.id
        finally:
            for stream in streams:
                await stream.close()
