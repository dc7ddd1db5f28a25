"""What an operator sees of a runner: log lines and an unreachable server (issue 15)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal

from openagentcore import APIConnectionError, ArgumentsError, AsyncClient, Client
from openagentcore.local import FunctionCall, LocalCore
from openagentcore.runner import (
    INTERNAL_ERROR,
    AsyncFunctionRunner,
    FunctionRunner,
    ServeTimeout,
)
from openagentcore.runner._pump import Reconnect
from openagentcore.store import CallKey, MemoryResultStore

from ._support import PAIRED, Flavour, Harness, RunnerKind, flavoured, one_turn

MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]

RUNNER_COMBINATIONS = PAIRED


class CardDeclined(Exception):
    pass


def _serve_one(
    make_core: MakeCore,
    make_harness: MakeHarness,
    func: Callable[..., Any],
    arguments: dict[str, Any],
    flavour: Flavour,
    **options: Any,
) -> tuple[Harness, str]:
    harness = make_harness(
        make_core(scenario=one_turn([FunctionCall(func.__name__, arguments)])), **options
    )
    harness.runner.function(name=func.__name__)(flavoured(func, flavour))
    session_id = harness.create_session()
    assert harness.serve(session_id).final_status == "idle"
    return harness, session_id


def _charge(card: str) -> str:
    """Charge a card."""
    raise CardDeclined(f"card {card} declined")


def test_a_function_that_raised_is_a_warning_with_its_traceback_never_sent(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="openagentcore")
    harness, session_id = _serve_one(make_core, make_harness, _charge, {"card": "4242"}, flavour)

    ((call_id, result),) = harness.core.stored_results(session_id).items()
    assert result["error"] == INTERNAL_ERROR
    (record,) = [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name == "openagentcore.runner" and r.exc_info
    ]
    message = record.getMessage()
    assert "_charge" in message
    assert call_id in message
    assert session_id in message
    assert "CardDeclined" in message
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], CardDeclined)
    assert "Traceback" in caplog.text
    assert "Traceback" not in str(result)


def test_arguments_the_model_got_wrong_are_a_warning_and_reach_on_error(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[tuple[CallKey, BaseException]] = []

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    caplog.set_level(logging.WARNING, logger="openagentcore")
    harness, session_id = _serve_one(
        make_core,
        make_harness,
        add,
        {"a": "not a number", "b": 2},
        flavour,
        on_error=lambda key, error: seen.append((key, error)),
    )

    ((call_id, result),) = harness.core.stored_results(session_id).items()
    assert result["success"] is False
    ((key, error),) = seen
    assert key.call_id == call_id
    assert isinstance(error, ArgumentsError)
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "add" in warning.getMessage()
    assert call_id in warning.getMessage()
    assert "`a`" in warning.getMessage()
    assert "not a number" not in warning.getMessage()


def test_each_call_logs_one_line_when_it_starts_and_one_when_it_settles(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def greet(name: str) -> str:
        """Greet someone."""
        return f"hello {name}"

    caplog.set_level(logging.INFO, logger="openagentcore.runner.calls")
    harness, session_id = _serve_one(make_core, make_harness, greet, {"name": "Ada"}, flavour)

    ((call_id, _),) = harness.core.stored_results(session_id).items()
    lines = [r.getMessage() for r in caplog.records if r.name == "openagentcore.runner.calls"]
    started = [line for line in lines if line.startswith("call started")]
    settled = [line for line in lines if line.startswith("call settled")]
    assert len(started) == 1
    assert len(settled) == 1
    for line in (started[0], settled[0]):
        assert "greet" in line
        assert f"call_id={call_id}" in line
        assert f"session={session_id}" in line
    assert "attempt=1" in started[0]
    assert "outcome=submitted" in settled[0]
    assert "duration=" in settled[0]


# -- an unreachable server --------------------------------------------------------------


def _closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve_unreachable(kind: RunnerKind, until: str, timeout: float, **options: Any) -> None:
    base_url = f"http://user:hunter2@127.0.0.1:{_closed_port()}/v1"
    options.setdefault("unreachable_timeout", 1.0)
    options.setdefault("reconnect_max_delay", 0.2)
    if kind == "sync":
        with (
            Client(api_key="sk-test", base_url=base_url, max_retries=0) as client,
            FunctionRunner(client, store=MemoryResultStore(), **options) as runner,
        ):
            runner.serve("sess_unreachable", until=until, timeout=timeout)  # type: ignore[arg-type]
        return

    async def serve() -> None:
        client = AsyncClient(api_key="sk-test", base_url=base_url, max_retries=0)
        async with client, AsyncFunctionRunner(client, store=MemoryResultStore(), **options) as r:
            await r.serve("sess_unreachable", until=until, timeout=timeout)  # type: ignore[arg-type]

    with start_blocking_portal() as portal:
        portal.call(serve)


def test_serve_until_idle_raises_naming_the_url_when_the_server_cannot_be_reached(
    runner_kind: RunnerKind,
) -> None:
    with pytest.raises(APIConnectionError) as raised:
        _serve_unreachable(runner_kind, "idle", timeout=60)

    message = str(raised.value)
    assert "http://127.0.0.1:" in message
    assert "/v1" in message
    assert "hunter2" not in message
    assert "OPENAGENTCORE_BASE_URL" in message


def test_serve_forever_keeps_trying_and_keeps_saying_so(
    runner_kind: RunnerKind,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every failed attempt warns, so the count does not depend on the machine's speed.
    monkeypatch.setattr(Reconnect, "WARN_AFTER", 0.0)
    monkeypatch.setattr(Reconnect, "WARN_EVERY", 0.0)
    caplog.set_level(logging.WARNING, logger="openagentcore.runner")

    # Well past unreachable_timeout: forever does not give up, only the serve's timeout
    # ends it.
    with pytest.raises(ServeTimeout):
        _serve_unreachable(runner_kind, "forever", timeout=3, shutdown_grace=0)

    warnings = [
        r.getMessage() for r in caplog.records if "Cannot reach the server" in r.getMessage()
    ]
    assert len(warnings) >= 2
    assert all("still trying" in w and "hunter2" not in w for w in warnings)
    assert "http://127.0.0.1:" in warnings[0]


# -- OPENAGENTCORE_LOG --------------------------------------------------------------------

_PROBE = """
import logging, openagentcore
print(logging.getLogger("openagentcore").level, logging.getLogger("httpx").level)
logging.getLogger("openagentcore.runner").info("probe line")
"""


@pytest.mark.parametrize(
    ("value", "levels", "printed"),
    [
        ("debug", "10 10", True),
        ("INFO", "20 0", True),
        ("warning", "30 0", False),
        ("", "0 0", False),
    ],
)
def test_openagentcore_log_sets_the_sdk_loggers_like_openai_log(
    value: str, levels: str, printed: bool
) -> None:
    env = {**os.environ, "OPENAGENTCORE_LOG": value}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == levels
    assert ("probe line" in done.stderr) is printed
    if printed:
        assert "openagentcore.runner" in done.stderr


def test_recover_gives_up_on_a_server_it_cannot_reach(runner_kind: RunnerKind) -> None:
    """``openagentcore recover`` with a wrong base URL waited forever."""
    with pytest.raises(APIConnectionError) as raised:
        _recover_unreachable(runner_kind)
    assert "http://127.0.0.1:" in str(raised.value)
    assert "OPENAGENTCORE_BASE_URL" in str(raised.value)


def _recover_unreachable(kind: RunnerKind) -> None:
    base_url = f"http://127.0.0.1:{_closed_port()}/v1"
    options: dict[str, Any] = {"unreachable_timeout": 1.0, "shutdown_grace": 0}
    if kind == "sync":
        with (
            Client(api_key="sk-test", base_url=base_url, max_retries=0) as client,
            FunctionRunner(client, store=MemoryResultStore(), **options) as runner,
        ):
            runner.recover("sess_unreachable", timeout=5)
        return

    async def recover() -> None:
        client = AsyncClient(api_key="sk-test", base_url=base_url, max_retries=0)
        runner = AsyncFunctionRunner(client, store=MemoryResultStore(), **options)
        async with client, runner:
            await runner.recover("sess_unreachable", timeout=5)

    with start_blocking_portal() as portal:
        portal.call(recover)
