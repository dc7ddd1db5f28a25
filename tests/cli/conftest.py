from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from openagentcore import Client
from openagentcore.local import LocalCore
from openagentcore.types import FunctionCallAction

from ._support import TOOL, pending_call


@pytest.fixture
def setup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Client, str, FunctionCallAction, Path]]:
    core = LocalCore(keepalive_interval=0.5).start()
    monkeypatch.setenv("OPENAGENTCORE_BASE_URL", core.base_url)
    monkeypatch.setenv("OPENAGENTCORE_API_KEY", core.api_key)
    client = Client()
    session = client.sessions.create(agent={"model": "scripted", "tools": [TOOL]}, input="go")
    action = pending_call(client, session.id)
    yield client, session.id, action, tmp_path / "calls.db"
    client.close()
    core.stop()
