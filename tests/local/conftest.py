from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from openagentcore.local import LocalCore

from ._support import Api, EventReader

pytest_plugins = ["pytester"]


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


@pytest.fixture
def core(make_core: Callable[..., LocalCore]) -> LocalCore:
    return make_core()


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
