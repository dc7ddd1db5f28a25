"""The core does no I/O, logging included: what it has to say comes out as notes, and
the observer logs them, with the same text and level as the core once logged itself."""

from __future__ import annotations

import logging

import httpx
import pytest

from openagentcore._errors import APIConnectionError
from openagentcore.runner._core import RunnerCore
from openagentcore.runner._effects import LogNote, ReadSession, SessionOutcome
from openagentcore.runner._observe import CallObserver
from openagentcore.runner._registry import FunctionRegistry

SESSION = "sess_notes"


def _core() -> RunnerCore:
    return RunnerCore(
        FunctionRegistry(),
        owner="test-owner",
        lease_seconds=60.0,
        max_concurrency=1,
        unknown_functions="leave",
        poll_interval=1.0,
        in_doubt_hook=False,
        action_hook=False,
    )


def test_a_failed_read_is_a_note_the_observer_logs(caplog: pytest.LogCaptureFixture) -> None:
    core = _core()
    serve = core.attach(SESSION, "idle", 0.0)
    core.on_connected(serve, 0.0)
    assert any(isinstance(effect, ReadSession) for effect in core.take_effects(0.0))
    request = httpx.Request("GET", f"https://api.test/v1/agents/sessions/{SESSION}")
    failed = APIConnectionError(request=request, message="connection refused")

    with caplog.at_level(logging.DEBUG, logger="openagentcore"):
        core.on_session_read(SessionOutcome(SESSION, None, error=failed), 0.0)
        assert caplog.records == []  # the core itself logs nothing
        notes = core.take_notes()
        CallObserver().observe(notes, 0.0)

    (note,) = [note for note in notes if isinstance(note, LogNote)]
    assert note.level == logging.WARNING
    (record,) = caplog.records
    assert record.name == "openagentcore.runner"
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(
        f"Could not read Session {SESSION} from https://api.test/v1/agents/sessions/{SESSION}"
    )
