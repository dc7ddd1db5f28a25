"""The client's own cost per request, sync and async, against a bare httpx client.

    python bench/client_overhead.py                  # 2,000 calls of each kind
    python bench/client_overhead.py --calls 5000 --rounds 5 --output overhead.json
    python bench/client_overhead.py --instructions --calls 30 --events 300   # ~15 min

Against the emulator in a process of its own (so this process's CPU time is the
client's alone), it measures, per call:

- ``events.create``: the POST of one small tool result (the runner's hot request). The
  same result is posted again and again: the server accepts a repeat of an admitted
  result, so every POST does the same server work and gets a 202;
- ``sessions.retrieve``: a GET whose body becomes a ``Session`` model;

each with the wall time and the CPU time (``time.process_time``) of every call, reported
as median and p99, plus the CPU time of one call relative to a bare ``httpx.Client`` (or
``httpx.AsyncClient``) sending the same request with the same headers. The bare GET only
decodes the JSON; it builds no model.

Event streams: the bytes of a real Turn's stream are recorded once, then fed (one chunk
per event, as the server flushes them) to ``EventStream``/``AsyncEventStream`` and to a
bare ``iter_lines`` + ``json.loads`` loop; the figure is events parsed per CPU second.

Contenders run in rounds, interleaved, so a burst of load from other processes on a
shared machine hits all of them. Trust CPU time over wall time, and several runs over one.

``--instructions`` counts instructions per call (per event for streams) with valgrind's
callgrind instead: each contender runs in a child process under valgrind with ``n`` and
``3n`` calls, and startup cancels out of the difference. The count does not move with the
machine's load (two runs agree to within 2%), so it can compare two versions of the
client run at different times, e.g. with ``PYTHONPATH=<other checkout>/src``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import re
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from _emulator import Emulator
from _workloads import TOOL_RESULT, _create_idle_session

from openagentcore import AsyncClient, Client
from openagentcore._streaming import AsyncEventStream, EventStream

Call = Callable[[], Any]
AsyncCall = Callable[[], Awaitable[Any]]


@dataclass
class Samples:
    """Per-call wall and CPU seconds of one contender on one operation."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


@dataclass
class Fixture:
    """What every contender talks to: an idle Session, a result it may post again and
    again, and the recorded bytes of one Turn's event stream, one chunk per event."""

    base_url: str
    api_key: str
    session_id: str
    result: dict[str, Any]
    stream_chunks: list[bytes]

    @property
    def events_path(self) -> str:
        return f"agents/sessions/{self.session_id}/events"

    @property
    def session_path(self) -> str:
        return f"agents/sessions/{self.session_id}"

    def to_json(self) -> str:
        fields = asdict(self)
        fields["stream_chunks"] = [chunk.decode("latin-1") for chunk in self.stream_chunks]
        return json.dumps(fields)

    @classmethod
    def from_json(cls, text: str) -> Fixture:
        fields = json.loads(text)
        fields["stream_chunks"] = [chunk.encode("latin-1") for chunk in fields["stream_chunks"]]
        return cls(**fields)

    @property
    def events_per_turn(self) -> int:
        """Events in the recorded stream (frames with data)."""
        return sum(1 for chunk in self.stream_chunks if b"\ndata:" in b"\n" + chunk)

    def bare_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}", "OpenAI-Beta": "agents=v1"}


def prepare(emulator: Emulator) -> Fixture:
    """Run one Turn with one function call by hand, recording its stream's bytes."""
    base_url = emulator.base_url.rstrip("/") + "/"
    headers = {"Authorization": f"Bearer {emulator.api_key}", "OpenAI-Beta": "agents=v1"}
    with Client(base_url=emulator.base_url, api_key=emulator.api_key) as client:
        session_id = _create_idle_session(client)
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as http:
        path = f"agents/sessions/{session_id}/events"
        recorded = bytearray()
        result: dict[str, Any] | None = None
        with http.stream("GET", path, headers={"Accept": "text/event-stream"}) as stream:
            message = {"role": "user", "content": [{"type": "input_text", "text": "Work."}]}
            event = {"type": "agent.session.input.message", "input": [message]}
            http.post(path, json={"events": [event]}).raise_for_status()
            for line in stream.iter_lines():
                recorded += line.encode() + b"\n"
                if not line.startswith("data:"):
                    continue
                data = json.loads(line[5:])
                item = data.get("item") or {}
                if data["type"] == "agent.session.turn.item.added" and (
                    item.get("type") == "function_call"
                ):
                    result = {
                        "type": TOOL_RESULT,
                        "turn_id": item["turn_id"],
                        "call_id": item["call_id"],
                        "success": True,
                        "output": "done 0",
                    }
                    http.post(path, json={"events": [result]}).raise_for_status()
                elif data["type"] in ("agent.session.turn.completed", "agent.session.turn.failed"):
                    break
    if result is None:
        raise RuntimeError("the Turn made no function call")
    chunks = [part + b"\n\n" for part in bytes(recorded).split(b"\n\n") if part.strip()]
    return Fixture(emulator.base_url, emulator.api_key, session_id, result, chunks)


# -- request contenders ------------------------------------------------------------------


def sync_contenders(fixture: Fixture) -> tuple[dict[str, dict[str, Call]], Callable[[], None]]:
    client = Client(base_url=fixture.base_url, api_key=fixture.api_key)
    bare = httpx.Client(
        base_url=fixture.base_url.rstrip("/") + "/", headers=fixture.bare_headers(), timeout=60
    )
    events = [fixture.result]

    def bare_post() -> None:
        key = {"Idempotency-Key": f"oac-{uuid.uuid4().hex}"}
        bare.post(fixture.events_path, json={"events": events}, headers=key).raise_for_status()

    def bare_get() -> None:
        response = bare.get(fixture.session_path)
        response.raise_for_status()
        response.json()

    calls = {
        "events.create": {
            "sdk sync": lambda: client.sessions.events.create(fixture.session_id, events=events),
            "httpx sync": bare_post,
        },
        "sessions.retrieve": {
            "sdk sync": lambda: client.sessions.retrieve(fixture.session_id),
            "httpx sync": bare_get,
        },
    }

    def close() -> None:
        client.close()
        bare.close()

    return calls, close


def async_contenders(
    fixture: Fixture,
) -> tuple[dict[str, dict[str, AsyncCall]], Callable[[], Awaitable[None]]]:
    client = AsyncClient(base_url=fixture.base_url, api_key=fixture.api_key)
    bare = httpx.AsyncClient(
        base_url=fixture.base_url.rstrip("/") + "/", headers=fixture.bare_headers(), timeout=60
    )
    events = [fixture.result]

    async def sdk_post() -> None:
        await client.sessions.events.create(fixture.session_id, events=events)

    async def sdk_get() -> None:
        await client.sessions.retrieve(fixture.session_id)

    async def bare_post() -> None:
        key = {"Idempotency-Key": f"oac-{uuid.uuid4().hex}"}
        response = await bare.post(fixture.events_path, json={"events": events}, headers=key)
        response.raise_for_status()

    async def bare_get() -> None:
        response = await bare.get(fixture.session_path)
        response.raise_for_status()
        response.json()

    calls = {
        "events.create": {"sdk async": sdk_post, "httpx async": bare_post},
        "sessions.retrieve": {"sdk async": sdk_get, "httpx async": bare_get},
    }

    async def close() -> None:
        await client.close()
        await bare.aclose()

    return calls, close


def time_sync(call: Call, count: int, samples: Samples) -> None:
    for _ in range(count):
        wall, cpu = time.perf_counter(), time.process_time()
        call()
        samples.cpu.append(time.process_time() - cpu)
        samples.wall.append(time.perf_counter() - wall)


async def time_async(call: AsyncCall, count: int, samples: Samples) -> None:
    for _ in range(count):
        wall, cpu = time.perf_counter(), time.process_time()
        await call()
        samples.cpu.append(time.process_time() - cpu)
        samples.wall.append(time.perf_counter() - wall)


def measure_requests(fixture: Fixture, calls: int, rounds: int) -> dict[str, dict[str, Samples]]:
    """Per-call samples of every contender, ``rounds`` interleaved rounds of each."""
    per_round = max(1, calls // rounds)
    warmup = min(100, per_round)
    sync_calls, close_sync = sync_contenders(fixture)
    samples: dict[str, dict[str, Samples]] = {op: {} for op in sync_calls}

    async def run_async() -> None:
        async_calls, close_async = async_contenders(fixture)
        for by_name in async_calls.values():
            for call in by_name.values():
                await time_async(call, warmup, Samples())
        for round_number in range(rounds):
            for operation, by_name in async_calls.items():
                names = list(by_name) if round_number % 2 == 0 else list(reversed(by_name))
                for name in names:
                    slot = samples[operation].setdefault(name, Samples())
                    await time_async(by_name[name], per_round, slot)
        await close_async()

    for by_name in sync_calls.values():
        for call in by_name.values():
            time_sync(call, warmup, Samples())
    gc.collect()
    for round_number in range(rounds):
        for operation, by_name in sync_calls.items():
            names = list(by_name) if round_number % 2 == 0 else list(reversed(by_name))
            for name in names:
                time_sync(by_name[name], per_round, samples[operation].setdefault(name, Samples()))
    close_sync()
    asyncio.run(run_async())
    return samples


# -- event stream parsing ----------------------------------------------------------------


def _stream_response(chunks: list[bytes], *, asynchronous: bool) -> httpx.Response:
    request = httpx.Request("GET", "http://emulator.invalid/v1/agents/sessions/s/events")
    headers = {"content-type": "text/event-stream"}
    if asynchronous:

        class Body(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                for chunk in chunks:
                    yield chunk

        return httpx.Response(200, headers=headers, stream=Body(), request=request)

    class SyncBody(httpx.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            yield from chunks

    return httpx.Response(200, headers=headers, stream=SyncBody(), request=request)


def _bare_parse(response: httpx.Response) -> int:
    count = 0
    for line in response.iter_lines():
        if line.startswith("data:"):
            json.loads(line[5:])
            count += 1
    return count


def _sdk_parse(response: httpx.Response) -> int:
    return sum(1 for _ in EventStream(response))


async def _sdk_parse_async(response: httpx.Response) -> int:
    return sum([1 async for _ in AsyncEventStream(response)])


def measure_streams(fixture: Fixture, events: int, rounds: int) -> dict[str, list[float]]:
    """Events parsed per CPU second, one figure per round and contender."""
    chunks = fixture.stream_chunks * max(1, events // fixture.events_per_turn)
    rates: dict[str, list[float]] = {"sdk sync": [], "sdk async": [], "bare iter_lines": []}

    def timed(name: str, parse: Callable[[], int]) -> None:
        started = time.process_time()
        parsed = parse()
        rates[name].append(parsed / (time.process_time() - started))

    for _ in range(rounds):
        timed("sdk sync", lambda: _sdk_parse(_stream_response(chunks, asynchronous=False)))
        timed(
            "sdk async",
            lambda: asyncio.run(_sdk_parse_async(_stream_response(chunks, asynchronous=True))),
        )
        timed("bare iter_lines", lambda: _bare_parse(_stream_response(chunks, asynchronous=False)))
    return rates


# -- report ------------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def report(requests: dict[str, dict[str, Samples]], streams: dict[str, list[float]]) -> str:
    lines = [
        "| operation | contender | wall median µs | wall p99 µs | CPU median µs | CPU p99 µs "
        "| CPU ÷ bare httpx |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for operation, by_name in requests.items():
        medians = {name: statistics.median(s.cpu) for name, s in by_name.items()}
        for name, samples in by_name.items():
            bare = "httpx async" if "async" in name else "httpx sync"
            lines.append(
                f"| {operation} | {name} | {statistics.median(samples.wall) * 1e6:.0f} "
                f"| {percentile(samples.wall, 0.99) * 1e6:.0f} | {medians[name] * 1e6:.0f} "
                f"| {percentile(samples.cpu, 0.99) * 1e6:.0f} "
                f"| {medians[name] / medians[bare]:.2f} |"
            )
    lines += ["", "| event stream | events per CPU second (median of rounds) |", "| --- | ---: |"]
    for name, rates in streams.items():
        lines.append(f"| {name} | {statistics.median(rates):,.0f} |")
    return "\n".join(lines)


# -- instructions, counted by valgrind ----------------------------------------------------

STREAM = "event stream"


def run_child(config: dict[str, Any]) -> None:
    """Make ``count`` calls of one contender after a warm-up (for the stream, parse the
    recorded Turn ``count`` times over)."""
    fixture = Fixture.from_json(config["fixture"])
    operation, name, count = config["operation"], config["contender"], config["count"]
    if operation == STREAM:
        parse = {"sdk sync": _sdk_parse, "bare iter_lines": _bare_parse}
        chunks = fixture.stream_chunks * count
        if name == "sdk async":
            asyncio.run(_sdk_parse_async(_stream_response(chunks, asynchronous=True)))
        else:
            parse[name](_stream_response(chunks, asynchronous=False))
        return
    if "async" in name:

        async def run_async() -> None:
            calls, close = async_contenders(fixture)
            for _ in range(count + 20):
                await calls[operation][name]()
            await close()

        asyncio.run(run_async())
        return
    calls, close = sync_contenders(fixture)
    for _ in range(count + 20):
        calls[operation][name]()
    close()


def _instructions(config: dict[str, Any]) -> int:
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--child",
            json.dumps(config),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"valgrind printed no instruction count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def count_instructions(fixture: Fixture, calls: int, events: int) -> dict[str, dict[str, float]]:
    """Instructions per call (or per event), counted by valgrind's callgrind: the same
    on a loaded machine as on an idle one. Each contender runs twice in a child process,
    with ``n`` and ``3n`` calls; startup and imports cancel out of the difference."""
    plan = {
        "events.create": ["sdk sync", "httpx sync", "sdk async", "httpx async"],
        "sessions.retrieve": ["sdk sync", "httpx sync", "sdk async", "httpx async"],
        STREAM: ["sdk sync", "sdk async", "bare iter_lines"],
    }
    counts: dict[str, dict[str, float]] = {}
    for operation, names in plan.items():
        if operation == STREAM:
            n = max(1, events // fixture.events_per_turn)
            units = 2 * n * fixture.events_per_turn
        else:
            n, units = calls, 2 * calls
        for name in names:
            config = {"fixture": fixture.to_json(), "operation": operation, "contender": name}
            small = _instructions({**config, "count": n})
            large = _instructions({**config, "count": 3 * n})
            counts.setdefault(operation, {})[name] = (large - small) / units
            figure = counts[operation][name]
            print(f"  {operation} / {name}: {figure:,.0f} instructions", flush=True)
    return counts


def report_instructions(counts: dict[str, dict[str, float]]) -> str:
    lines = [
        "| operation | contender | instructions per call (per event for streams) | ÷ bare |",
        "| --- | --- | ---: | ---: |",
    ]
    for operation, by_name in counts.items():
        for name, count in by_name.items():
            bare = (
                {"sync": "httpx sync", "async": "httpx async"}[name.split()[-1]]
                if (operation != STREAM)
                else "bare iter_lines"
            )
            lines.append(f"| {operation} | {name} | {count:,.0f} | {count / by_name[bare]:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per contender and kind")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds")
    parser.add_argument("--events", type=int, default=20000, help="stream events per round")
    parser.add_argument("--output", type=Path, help="write the raw figures as JSON here")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions with valgrind instead (slow: --calls 200 --events 2000 is plenty)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        run_child(json.loads(args.child))
        return
    scenario = {"turns": 1, "steps": 1, "calls_per_step": 1}
    raw: dict[str, Any] = {}
    with Emulator(scenario) as emulator:
        fixture = prepare(emulator)
        if args.instructions:
            raw["instructions"] = count_instructions(fixture, args.calls, args.events)
        else:
            requests = measure_requests(fixture, args.calls, args.rounds)
    if args.instructions:
        print(report_instructions(raw["instructions"]))
    else:
        streams = measure_streams(fixture, args.events, args.rounds)
        print(report(requests, streams))
        raw["requests"] = {
            op: {name: {"wall": s.wall, "cpu": s.cpu} for name, s in by_name.items()}
            for op, by_name in requests.items()
        }
        raw["streams"] = streams
    if args.output is not None:
        args.output.write_text(json.dumps(raw))


if __name__ == "__main__":
    main()
