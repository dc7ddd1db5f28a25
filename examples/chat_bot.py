"""A terminal chat bot that streams its answers, serves functions while it talks, and picks
up where it left off after being killed.

    python examples/chat_bot.py                      # chat; Ctrl-D to quit
    python examples/chat_bot.py --once "Weather in Paris?"

It keeps the Session ID in ``--state-dir`` (default ``.chat_bot``). Started again after
a crash, even a kill -9 in the middle of a Turn, it resumes that Session: the runner
settles the call that was running (its functions are read-only, so it simply runs them
again) and the Turn finishes.

Without OPENAGENTCORE_BASE_URL it runs the local emulator in-process, with its state in
the same directory so the Session survives restarts; the emulator's scripted model
answers from a script instead of understanding the question.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import sys
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from pathlib import Path

from openagentcore import (
    AsyncClient,
    AsyncEventStream,
    AsyncFunctionRunner,
    CallContext,
    SQLiteResultStore,
)
from openagentcore.types import MessageItem, OutputTextDeltaEvent, TerminalTurnEvent

WEATHER = {"paris": "sunny, 21 °C", "london": "drizzle, 14 °C", "tokyo": "cloudy, 18 °C"}
UTC_OFFSETS = {"paris": 1, "london": 0, "tokyo": 9}


def say(text: str) -> None:
    print(text, flush=True)


def build_runner(client: AsyncClient, store: Path, slow: float) -> AsyncFunctionRunner:
    runner = AsyncFunctionRunner(client, store=SQLiteResultStore(store))

    # Read-only functions: safe to run again after a crash, so they are idempotent.
    @runner.function(idempotent=True, timeout=60)
    async def weather(city: str, ctx: CallContext) -> str:
        """Today's weather in a city.

        Args:
            city: The city, such as Paris.
        """
        say(f"  [calling weather({city!r}), attempt {ctx.attempt}]")
        await asyncio.sleep(slow)  # a slow upstream API, to leave time for a kill -9
        return WEATHER.get(city.lower(), "no forecast available")

    @runner.function(idempotent=True)
    def local_time(city: str) -> str:
        """The time of day in a city, as HH:MM.

        Args:
            city: The city, such as Tokyo.
        """
        say(f"  [calling local_time({city!r})]")
        offset = UTC_OFFSETS.get(city.lower(), 0)
        return f"{(12 + offset) % 24:02d}:00"

    return runner


@dataclass
class State:
    """What the bot remembers between runs, in ``state-dir/chat_bot.json``."""

    path: Path
    session_id: str | None = None
    emulator_key: str | None = None

    @classmethod
    def load(cls, directory: Path) -> State:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "chat_bot.json"
        if not path.exists():
            return cls(path)
        data = json.loads(path.read_text())
        return cls(path, data.get("session_id"), data.get("emulator_key"))

    def save(self) -> None:
        data = {"session_id": self.session_id, "emulator_key": self.emulator_key}
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(data))
        os.replace(temporary, self.path)


class Bot:
    def __init__(self, client: AsyncClient, runner: AsyncFunctionRunner, state: State) -> None:
        self.client = client
        self.runner = runner
        self.state = state

    async def resume(self) -> None:
        """Back in the remembered Session; finish its Turn if one was cut short."""
        if self.state.session_id is None:
            return
        session = await self.client.sessions.retrieve(self.state.session_id)
        if session.status == "idle":
            say(f"Back in Session {session.id}")
            return
        say(f"Resuming Session {session.id}: a Turn was in progress ({session.status})")
        stream = await self.client.sessions.events.stream(session.id)
        await self.streamed(stream, self.runner.serve(session.id, timeout=120))

    async def ask(self, question: str) -> None:
        if self.state.session_id is None:
            # A Session starts with its first input; follow its creation as events.
            created = await self.client.sessions.create(
                stream=True,
                agent={
                    "model": os.environ.get("CHAT_BOT_MODEL", "scripted"),
                    "instructions": "You are a concise travel assistant.",
                    "tools": self.runner.tools,
                },
                input=question,
            )
            async for _ in created:
                if created.session is not None:
                    break
            assert created.session is not None
            self.state.session_id = created.session.id
            self.state.save()  # before any call runs: a restart finds the Session
            say(f"New Session {created.session.id}")
            await self.streamed(created, self.runner.serve(created.session.id, timeout=120))
            return
        stream = await self.client.sessions.events.stream(self.state.session_id)
        await self.streamed(stream, self.runner.run_turn(self.state.session_id, question))

    async def streamed(self, stream: AsyncEventStream, serving: Awaitable[object]) -> None:
        """Serve the Turn while printing its answer text as it arrives on ``stream``."""
        printed: list[str] = []

        async def print_deltas() -> None:
            async for event in stream:
                if isinstance(event, OutputTextDeltaEvent):
                    if not printed:
                        print("bot> ", end="", flush=True)
                    printed.append(event.delta)
                    print(event.delta, end="", flush=True)
                elif isinstance(event, TerminalTurnEvent):
                    return

        printer = asyncio.create_task(print_deltas())
        try:
            await serving
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(printer), 10)
        finally:
            printer.cancel()
            await stream.close()
        if printed:
            print(flush=True)
        else:  # the answer came before the stream opened: show it whole
            say(f"bot> {await self.last_answer()}")

    async def last_answer(self) -> str:
        assert self.state.session_id is not None
        answer = ""
        async for item in self.client.sessions.items.list(self.state.session_id, order="asc"):
            if isinstance(item, MessageItem) and item.role == "assistant":
                answer = item.output_text
        return answer


SCRIPT_TURNS = (
    # What the emulator's scripted model does on each Turn, in order.
    (
        (("weather", {"city": "Paris"}), ("local_time", {"city": "Paris"})),
        "In Paris it is {weather} right now, and the local time is {local_time}.",
    ),
    ((("weather", {"city": "Tokyo"}),), "Tokyo today: {weather}."),
    ((), "You're welcome! Ask me about the weather or the time in a city."),
)


@contextlib.asynccontextmanager
async def server(state: State, directory: Path) -> AsyncIterator[tuple[str | None, str | None]]:
    """The server to use: the environment's, or an emulator whose state is kept in
    ``directory`` so that the Session outlives this process."""
    if os.environ.get("OPENAGENTCORE_BASE_URL"):
        yield None, None
        return
    from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript

    script = Scenario(
        turns=tuple(
            TurnScript(
                steps=(tuple(FunctionCall(name, args) for name, args in calls),) if calls else (),
                answer=answer,
            )
            for calls, answer in SCRIPT_TURNS
        )
    )
    if state.emulator_key is None:
        state.emulator_key = "sk-local-" + secrets.token_hex(16)
        state.save()
    core = LocalCore(script, state=directory / "emulator.db", api_key=state.emulator_key)
    await asyncio.to_thread(core.start)
    try:
        yield core.base_url, core.api_key
    finally:
        await asyncio.to_thread(core.stop)


async def chat(directory: Path, once: str | None, slow: float) -> None:
    state = State.load(directory)
    async with (
        server(state, directory) as (base_url, api_key),
        AsyncClient(base_url=base_url, api_key=api_key) as client,
    ):
        runner = build_runner(client, directory / "calls.db", slow)
        try:
            bot = Bot(client, runner, state)
            await bot.resume()
            if once is not None:
                say(f"you> {once}")
                await bot.ask(once)
                return
            interactive = sys.stdin.isatty()
            while True:
                if interactive:
                    print("you> ", end="", flush=True)
                line = await asyncio.to_thread(sys.stdin.readline)
                if not line:
                    break
                if line.strip():
                    await bot.ask(line.strip())
        finally:
            await runner.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, default=Path(".chat_bot"))
    parser.add_argument("--once", metavar="QUESTION", help="ask one question, then exit")
    parser.add_argument(
        "--slow", type=float, default=0.0, help="seconds the weather function takes"
    )
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(chat(args.state_dir, args.once, args.slow))


if __name__ == "__main__":
    main()
