"""pytest fixtures for testing applications against the local emulator.

Installed as a ``pytest11`` plugin, so the fixtures need no import:

- ``local_core``: a fresh :class:`~openagentcore.local.LocalCore` per test;
- ``client`` / ``async_client``: an ``openagentcore.Client`` / ``AsyncClient`` bound
  to it.

Without the ``local`` extra (starlette, uvicorn) the fixtures skip the test and say
what to install, so the plugin never breaks an unrelated test run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from openagentcore import AsyncClient, Client
    from openagentcore.local import LocalCore

__all__ = ["async_client", "client", "local_core"]

_MISSING_EXTRA = (
    "the openagentcore local emulator needs its extra: pip install 'openagentcore[local]'"
)


@pytest.fixture
def local_core() -> Iterator[LocalCore]:
    """A local Agents API server with a scripted model, stopped after the test."""
    try:
        from openagentcore.local import LocalCore
    except ImportError as error:
        pytest.skip(f"{_MISSING_EXTRA} ({error})")
    with LocalCore() as core:
        yield core


@pytest.fixture
def client(local_core: LocalCore) -> Iterator[Client]:
    """An ``openagentcore.Client`` for ``local_core``."""
    from openagentcore import Client

    with Client(api_key=local_core.api_key, base_url=local_core.base_url) as bound:
        yield bound


@pytest.fixture
async def async_client(local_core: LocalCore) -> AsyncIterator[AsyncClient]:
    """An ``openagentcore.AsyncClient`` for ``local_core``; use with ``@pytest.mark.anyio``."""
    from openagentcore import AsyncClient

    async with AsyncClient(api_key=local_core.api_key, base_url=local_core.base_url) as bound:
        yield bound
