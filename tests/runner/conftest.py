from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from openagentcore.local import LocalCore

from ._support import ALL_COMBINATIONS, Flavour, Harness, RunnerKind


@pytest.fixture(scope="session")
def stopper() -> Iterator[Callable[[LocalCore], None]]:
    """Stops LocalCores in the background: a stop waits ~0.1 s on uvicorn, which adds up
    over a hundred tests. Every core is stopped before the session ends."""
    threads: list[threading.Thread] = []

    def stop(core: LocalCore) -> None:
        thread = threading.Thread(target=core.stop, name="stop-local-core")
        thread.start()
        threads.append(thread)

    yield stop
    for thread in threads:
        thread.join()


@pytest.fixture
def make_core(stopper: Callable[[LocalCore], None]) -> Iterator[Callable[..., LocalCore]]:
    """Start LocalCores with a scenario or faults; all are stopped after the test."""
    started: list[LocalCore] = []

    def make(**kwargs: Any) -> LocalCore:
        kwargs.setdefault("keepalive_interval", 0.2)
        core = LocalCore(**kwargs).start()
        started.append(core)
        return core

    yield make
    for core in started:
        stopper(core)


_RUNNER_NAMES = {"sync": "FunctionRunner", "async": "AsyncFunctionRunner"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "combination" not in metafunc.fixturenames:
        return
    combinations = getattr(metafunc.module, "RUNNER_COMBINATIONS", ALL_COMBINATIONS)
    # Vary only what the test uses: a test without functions of both kinds needs one
    # combination per runner, and one that builds its own runner one per kind of def.
    used = [
        index
        for index, name in enumerate(("runner_kind", "flavour"))
        if name in metafunc.fixturenames
    ]
    unique = {tuple(combination[i] for i in used): combination for combination in combinations}
    names = [
        "-".join(
            _RUNNER_NAMES[part] if i == 0 else part.replace(" ", "-")
            for i, part in zip(used, key, strict=True)
        )
        for key in unique
    ]
    metafunc.parametrize("combination", list(unique.values()), ids=names)


@pytest.fixture
def runner_kind(combination: tuple[RunnerKind, Flavour]) -> RunnerKind:
    return combination[0]


@pytest.fixture
def flavour(combination: tuple[RunnerKind, Flavour]) -> Flavour:
    return combination[1]


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
