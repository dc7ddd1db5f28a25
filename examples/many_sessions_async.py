"""One process serving many Sessions at once with an AsyncFunctionRunner.

    python examples/many_sessions_async.py --sessions 50

Each Session asks for a few calls; coroutine functions and a plain (blocking) function
run side by side, bounded by one ``max_concurrency`` across all Sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from openagentcore import AsyncClient, AsyncFunctionRunner, SQLiteResultStore


def build_runner(client: AsyncClient, store: Path, concurrency: int) -> AsyncFunctionRunner:
    runner = AsyncFunctionRunner(
        client, store=SQLiteResultStore(store), max_concurrency=concurrency
    )

    @runner.function
    async def fetch_weather(city: str) -> dict[str, object]:
        """Current weather for a city.

        Args:
            city: City name.
        """
        await asyncio.sleep(0.05)  # stands in for an HTTP call
        return {"city": city, "celsius": 21}

    @runner.function
    def convert_currency(amount: float, to: str = "EUR") -> str:
        """Convert US dollars; a blocking function, run in a worker thread.

        Args:
            amount: Dollars to convert.
            to: Target currency code.
        """
        time.sleep(0.01)
        return f"{amount * 0.9:.2f} {to}"

    return runner


async def serve_all(base_url: str | None, api_key: str | None, sessions: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with AsyncClient(base_url=base_url, api_key=api_key) as client:
            runner = build_runner(client, Path(tmp) / "calls.db", concurrency=32)
            created = await asyncio.gather(
                *(
                    client.sessions.create(
                        agent={"model": "scripted", "tools": runner.tools},
                        input=f"Plan trip number {n}.",
                    )
                    for n in range(sessions)
                )
            )
            started = time.perf_counter()
            reports = await asyncio.gather(
                *(runner.serve(session.id, timeout=120) for session in created)
            )
            elapsed = time.perf_counter() - started
            calls = sum(report.calls_run for report in reports)
            idle = sum(report.final_status == "idle" for report in reports)
            print(f"{len(reports)} Sessions, {calls} calls in {elapsed:.2f}s; {idle} idle")
            await runner.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    args = parser.parse_args()
    if os.environ.get("OPENAGENTCORE_BASE_URL"):
        asyncio.run(serve_all(None, None, args.sessions))
        return
    from openagentcore.local import LocalCore

    with LocalCore() as core:
        asyncio.run(serve_all(core.base_url, core.api_key, args.sessions))


if __name__ == "__main__":
    main()
