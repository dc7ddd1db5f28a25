"""LocalCore: the emulator as a real HTTP server on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import uvicorn

from ._app import create_app
from ._engine import Engine
from ._faults import Faults
from ._model import Scenario, ScriptedModel
from ._store import Store

__all__ = ["LocalCore", "serve"]

_STARTUP_TIMEOUT = 10.0


class _Server(uvicorn.Server):
    """uvicorn's server, woken at once on stop instead of at its next 100 ms tick.

    Tests start and stop a server per test; the tick alone would cost them 0.1-0.2 s each.
    """

    wake: asyncio.Event | None = None

    async def main_loop(self) -> None:
        self.wake = asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.wake.wait(), 0.1)

    def request_exit(self) -> None:
        """Called on the server loop: exit now."""
        self.should_exit = True
        if self.wake is not None:
            self.wake.set()


class LocalCore:
    """An Agents API server with a scripted model, for development and tests.

    ``with LocalCore() as core:`` serves on 127.0.0.1 and a free port in a background
    thread; point a client at ``core.base_url`` with ``core.api_key``. ``state`` names
    a SQLite file that keeps Sessions, Turns, Items and stored results across restarts.
    """

    def __init__(
        self,
        scenario: Scenario | str | Path | None = None,
        faults: Faults | None = None,
        state: str | Path | None = None,
        api_key: str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        keepalive_interval: float = 15.0,
    ) -> None:
        if isinstance(scenario, (str, Path)):
            scenario = Scenario.from_file(scenario)
        self.scenario = scenario
        self.faults = faults or Faults()
        self.state = state
        self.api_key = api_key or "sk-local-" + secrets.token_hex(16)
        self.host = host
        self.keepalive_interval = keepalive_interval
        self._requested_port = port
        self._port: int | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._engine: Engine | None = None
        self._store: Store | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        # Never show the key: reprs end up in logs and test reports.
        running = "running" if self._thread is not None else "stopped"
        url = self.base_url if self._port is not None else "-"
        return f"<LocalCore {running} {url}>"

    @property
    def base_url(self) -> str:
        """The API root including ``/v1``, e.g. ``http://127.0.0.1:54321/v1``."""
        if self._port is None:
            raise RuntimeError(
                "LocalCore is not running; call start() or use it as a context manager"
            )
        return f"http://{self.host}:{self._port}/v1"

    def start(self) -> LocalCore:
        """Start serving in a background thread and return once the port accepts requests."""
        if self._thread is not None:
            raise RuntimeError("LocalCore is already running")
        # Bound first: a port in use or an address not of this machine (OSError) then
        # leaves no state file open behind it.
        sock = _bind(self.host, self._port or self._requested_port)
        try:
            self._store = Store(self.state)
        except BaseException:
            sock.close()
            raise
        self._engine = Engine(self._store, ScriptedModel(self.scenario), self.faults)
        app = create_app(
            self._engine, api_key=self.api_key, keepalive_interval=self.keepalive_interval
        )
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(
            app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2
        )
        self._server = _Server(config)
        server = self._server

        def run() -> None:
            asyncio.run(self._serve(server, sock))

        self._thread = threading.Thread(target=run, name="openagentcore-local", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + _STARTUP_TIMEOUT
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("LocalCore failed to start; see the uvicorn log above")
            time.sleep(0.002)
        return self

    async def _serve(self, server: _Server, sock: socket.socket) -> None:
        self._loop = asyncio.get_running_loop()
        await server.serve(sockets=[sock])

    def stop(self) -> None:
        """Stop serving; open event streams end first so shutdown never waits on them."""
        server, thread, loop, engine = self._server, self._thread, self._loop, self._engine
        if loop is not None and engine is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(engine.close_streams)
            if server is not None:
                loop.call_soon_threadsafe(server.request_exit)
        if server is not None:
            server.should_exit = True
        if thread is not None:
            thread.join(timeout=_STARTUP_TIMEOUT)
        if self._store is not None:
            self._store.close()
        self._server = self._thread = self._loop = self._engine = self._store = None

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C raises ``KeyboardInterrupt`` here)."""
        while self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=0.5)

    def __enter__(self) -> LocalCore:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stored_results(self, session_id: str) -> dict[str, dict[str, object]]:
        """The ``tool_result`` events stored per call ID, exactly as submitted.

        A read-only view for assertions; it runs on the server loop, so it sees a
        consistent state.
        """
        engine, loop = self._engine, self._loop
        if engine is None or loop is None:
            raise RuntimeError("LocalCore is not running")

        async def read() -> dict[str, dict[str, object]]:
            return {
                call.call_id: dict(call.result)
                for call in engine.store.calls.values()
                if call.session_id == session_id and call.result is not None
            }

        return asyncio.run_coroutine_threadsafe(read(), loop).result(timeout=_STARTUP_TIMEOUT)

    def stream_counts(self) -> dict[str, int]:
        """The event streams open now, per Session with any: to check that a fleet
        follows each Session once. Read on the server loop, like :meth:`stored_results`."""
        engine, loop = self._engine, self._loop
        if engine is None or loop is None:
            raise RuntimeError("LocalCore is not running")

        async def read() -> dict[str, int]:
            return engine.stream_counts()

        return asyncio.run_coroutine_threadsafe(read(), loop).result(timeout=_STARTUP_TIMEOUT)

    def stalled_streams(self) -> int:
        """Streams the ``stall_stream_after`` fault silenced that the clients have not
        closed yet: a client that notices silent streams brings this back to 0."""
        engine, loop = self._engine, self._loop
        if engine is None or loop is None:
            raise RuntimeError("LocalCore is not running")

        async def read() -> int:
            return engine.stalled_streams

        return asyncio.run_coroutine_threadsafe(read(), loop).result(timeout=_STARTUP_TIMEOUT)


def _bind(host: str, port: int) -> socket.socket:
    # An explicit IPPROTO_TCP lets asyncio set TCP_NODELAY on accepted connections;
    # without it every response waits ~40 ms on Nagle and delayed ACKs.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def serve(core: LocalCore, *, announce: Callable[[str], object] = print) -> None:
    """Run ``core`` in the foreground until interrupted (Ctrl-C); it is started here
    unless the caller started it (to report a failure to start in its own words)."""
    if core._thread is None:
        core.start()
    announce(f"OpenAgentCore local emulator listening on {core.base_url}")
    announce(f"API key: {core.api_key}")
    announce(f"  export OPENAGENTCORE_BASE_URL={core.base_url}")
    announce(f"  export OPENAGENTCORE_API_KEY={core.api_key}")
    try:
        core.wait()
    except KeyboardInterrupt:
        pass
    finally:
        core.stop()
