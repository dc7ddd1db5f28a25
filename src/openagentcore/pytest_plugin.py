"""pytest fixtures for testing applications against the local emulator.

Installed as a ``pytest11`` plugin, so the fixtures need no import. Every name starts
with ``oac_`` so that it cannot shadow another plugin's fixture (pytest-django, for one,
has its own ``client`` and ``async_client``):

- ``oac_local_core``: a fresh [`LocalCore`][openagentcore.local.LocalCore] per test;
- ``oac_client`` / ``oac_async_client``: a `Client` / `AsyncClient` bound to it;
- ``oac_runner`` / ``oac_async_runner``: a `FunctionRunner` / `AsyncFunctionRunner` on
  that client, with a SQLite result store in the test's temporary directory.

Two markers configure ``oac_local_core`` for one test (or a module, with
``pytestmark``):

- ``@pytest.mark.oac_scenario(scenario)``: a `Scenario`, its dict form or a
  JSON/YAML file path;
- ``@pytest.mark.oac_faults(duplicate_every=3, ...)``: fields of `Faults`, or one
  `Faults` value.

Without the ``local`` extra (starlette, uvicorn) the fixtures skip the test and say
what to install, so the plugin never breaks an unrelated test run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from openagentcore import AsyncClient, AsyncFunctionRunner, Client, FunctionRunner
    from openagentcore.local import Faults, LocalCore, Scenario

__all__ = [
    "oac_async_client",
    "oac_async_runner",
    "oac_client",
    "oac_local_core",
    "oac_runner",
    "pytest_configure",
]

_MISSING_EXTRA = (
    "the openagentcore local emulator needs its extra: pip install 'openagentcore[local]'"
)


def pytest_configure(config: pytest.Config) -> None:
    """Register the plugin's markers, so ``--strict-markers`` suites accept them."""
    config.addinivalue_line(
        "markers",
        "oac_scenario(scenario): the Scenario (object, dict or JSON/YAML path) that the "
        "oac_local_core fixture's scripted model follows",
    )
    config.addinivalue_line(
        "markers",
        "oac_faults(faults=None, **fields): the Faults (object or field values) that the "
        "oac_local_core fixture turns on",
    )


def _scenario_from(request: pytest.FixtureRequest) -> Scenario | None:
    from openagentcore.local import Scenario

    marker = request.node.get_closest_marker("oac_scenario")
    if marker is None:
        return None
    if len(marker.args) != 1 or marker.kwargs:
        raise pytest.UsageError(
            "@pytest.mark.oac_scenario takes one argument: a Scenario, a dict or a file path"
        )
    value = marker.args[0]
    if isinstance(value, Scenario):
        return value
    if isinstance(value, Mapping):
        return Scenario.from_dict(value)
    if isinstance(value, (str, Path)):
        return Scenario.from_file(value)
    raise pytest.UsageError(
        f"@pytest.mark.oac_scenario got a {type(value).__name__}; "
        "pass a Scenario, a dict or a file path"
    )


def _faults_from(request: pytest.FixtureRequest) -> Faults | None:
    from openagentcore.local import Faults

    marker = request.node.get_closest_marker("oac_faults")
    if marker is None:
        return None
    fields: dict[str, Any] = dict(marker.kwargs)
    if marker.args:
        if len(marker.args) != 1 or not isinstance(marker.args[0], Faults) or fields:
            raise pytest.UsageError(
                "@pytest.mark.oac_faults takes one Faults value or keyword fields, "
                "e.g. oac_faults(duplicate_every=3)"
            )
        return marker.args[0]
    try:
        return Faults(**fields)
    except TypeError as error:
        raise pytest.UsageError(f"@pytest.mark.oac_faults: {error}") from None


@pytest.fixture
def oac_local_core(request: pytest.FixtureRequest) -> Iterator[LocalCore]:
    """A local Agents API server with a scripted model, stopped after the test.

    Configured by the ``oac_scenario`` and ``oac_faults`` markers.
    """
    try:
        from openagentcore.local import LocalCore
    except ImportError as error:
        pytest.skip(f"{_MISSING_EXTRA} ({error})")
    with LocalCore(scenario=_scenario_from(request), faults=_faults_from(request)) as core:
        yield core


@pytest.fixture
def oac_client(oac_local_core: LocalCore) -> Iterator[Client]:
    """An ``openagentcore.Client`` for ``oac_local_core``."""
    from openagentcore import Client

    with Client(api_key=oac_local_core.api_key, base_url=oac_local_core.base_url) as bound:
        yield bound


@pytest.fixture
async def oac_async_client(oac_local_core: LocalCore) -> AsyncIterator[AsyncClient]:
    """An ``openagentcore.AsyncClient`` for ``oac_local_core``; use with ``@pytest.mark.anyio``."""
    from openagentcore import AsyncClient

    async with AsyncClient(
        api_key=oac_local_core.api_key, base_url=oac_local_core.base_url
    ) as bound:
        yield bound


@pytest.fixture
def oac_runner(oac_client: Client, tmp_path: Path) -> Iterator[FunctionRunner]:
    """A ``FunctionRunner`` on ``oac_client`` whose result store lives in ``tmp_path``.

    Register the functions under test with ``oac_runner.function``; the store file
    (``oac_runner.store``) is kept for the test to inspect and removed with ``tmp_path``.
    """
    from openagentcore import FunctionRunner, SQLiteResultStore

    store = SQLiteResultStore(tmp_path / "openagentcore-calls.db")
    with FunctionRunner(oac_client, store=store) as runner:
        yield runner


@pytest.fixture
async def oac_async_runner(
    oac_async_client: AsyncClient, tmp_path: Path
) -> AsyncIterator[AsyncFunctionRunner]:
    """An ``AsyncFunctionRunner`` on ``oac_async_client`` with a store in ``tmp_path``."""
    from openagentcore import AsyncFunctionRunner, SQLiteResultStore

    store = SQLiteResultStore(tmp_path / "openagentcore-calls.db")
    async with AsyncFunctionRunner(oac_async_client, store=store) as runner:
        yield runner
