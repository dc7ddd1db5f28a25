"""Suite-wide fixtures."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

# Tests hold on a loaded machine (CI runs two workers on two cores): Hypothesis's checks
# of how fast examples are generated and run measure the machine, not the code.
settings.register_profile(
    "loaded-machine",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("loaded-machine")


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio, which the emulator and the runner require. With trio
    installed (the client's trio fallback is tested), anyio would otherwise run every
    async test on trio too; the tests meant for trio parametrize ``anyio_backend``."""
    return "asyncio"
