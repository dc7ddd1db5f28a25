from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from openagentcore.local import LocalCore


@pytest.fixture
def make_core() -> Iterator[Callable[..., LocalCore]]:
    """Start LocalCores with a scenario or faults; all are stopped after the test."""
    started: list[LocalCore] = []

    def make(**kwargs: Any) -> LocalCore:
        kwargs.setdefault("keepalive_interval", 0.2)
        core = LocalCore(**kwargs).start()
        started.append(core)
        return core

    yield make
    for core in started:
        core.stop()
