from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from openagentcore.local import LocalCore

from ._support import Api, EventReader


@pytest.fixture
def make_core() -> Iterator[Callable[..., LocalCore]]:
    """Start LocalCores with custom knobs; all are stopped after the test."""
    started: list[LocalCore] = []

    def make(**kwargs: Any) -> LocalCore:
        kwargs.setdefault("keepalive_interval", 0.2)
        core = LocalCore(**kwargs).start()
        started.append(core)
        return core

    yield make
    for core in started:
        core.stop()


@pytest.fixture(scope="module")
def core() -> Iterator[LocalCore]:
    """One server per module: tests isolate themselves by creating their own Sessions."""
    with LocalCore(keepalive_interval=0.2) as shared:
        yield shared


@pytest.fixture
def fresh_api(make_core: Callable[..., LocalCore]) -> Iterator[Api]:
    """An Api on a server of its own, for tests that look at global lists."""
    client = Api(make_core())
    yield client
    client.close()


@pytest.fixture
def api(core: LocalCore) -> Iterator[Api]:
    client = Api(core)
    yield client
    client.close()


@pytest.fixture
def open_stream(api: Api) -> Iterator[Callable[..., EventReader]]:
    readers: list[EventReader] = []

    def open_(session_id: str, target: Api | None = None) -> EventReader:
        reader = EventReader(target or api, session_id)
        readers.append(reader)
        return reader

    yield open_
    for reader in readers:
        reader.close()
