"""Suite-wide fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio, which the emulator and the runner require. With trio
    installed (the client's trio fallback is tested), anyio would otherwise run every
    async test on trio too; the tests meant for trio parametrize ``anyio_backend``."""
    return "asyncio"
