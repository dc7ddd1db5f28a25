from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from openagentcore.local import LocalCore

from ._support import Flavour, Harness, RunnerKind


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


@pytest.fixture(params=["sync", "async"], ids=["FunctionRunner", "AsyncFunctionRunner"])
def runner_kind(request: pytest.FixtureRequest) -> RunnerKind:
    kind: RunnerKind = request.param
    return kind


@pytest.fixture(params=["def", "async def"], ids=["def", "async-def"])
def flavour(request: pytest.FixtureRequest) -> Flavour:
    chosen: Flavour = request.param
    return chosen


@pytest.fixture
def make_harness(runner_kind: RunnerKind) -> Iterator[Callable[..., Harness]]:
    """Runners of the parametrized kind on a given LocalCore; closed after the test."""
    made: list[Harness] = []

    def make(core: LocalCore, **options: Any) -> Harness:
        harness = Harness(core, runner_kind, **options)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.close()
