"""Client-side workloads, each run in a fresh subprocess so its RSS and CPU are its own.

``python bench/_workloads.py NAME JSON`` runs one workload against an emulator whose
URL and key are in the JSON arguments, and prints one JSON line with what it measured
plus ``peak_rss_mb`` and ``cpu_seconds`` of this process.

Contenders, all serving the same no-op (or sleeping) function ``work(n)``:

- ``ours_sqlite`` / ``ours_memory``: FunctionRunner with a durable SQLite store or the
  in-memory one (AsyncFunctionRunner for the many-Sessions workload);
- ``ours_sqlite_idempotent``: ``ours_sqlite`` serving ``work`` declared
  ``idempotent=True``, with ``idempotent_fast_path=True`` (it starts as its claim is
  sent; its result is posted as it is saved);
- ``ours_async_sqlite`` / ``ours_async_memory``: AsyncFunctionRunner (in the per-call
  workload, its loop on a thread of its own, driven from a plain thread);
- ``openai``: openai 3.51's ``sessions.stream(..., tool_handlers=...)`` helper;
- ``raw``: a bare httpx loop that reads the event stream and posts each result, with no
  SDK, no store and no checks: the lower bound for this server and transport;
- ``raw_durable``: the raw loop plus the two synced SQLite commits a crash-safe runner
  needs (the call recorded before it runs, its result before it is posted), written
  with bare ``sqlite3``: the lower bound for durable serving on this machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from openagentcore import (
    AsyncClient,
    AsyncFunctionRunner,
    Client,
    FunctionRunner,
    MemoryResultStore,
    SQLiteResultStore,
)
from openagentcore.store import CallKey, ResultStore, arguments_hash, new_owner_id

TOOL_RESULT = "agent.session.input.tool_result"
RUN_TIMEOUT = 600.0


def _tool_declaration() -> dict[str, Any]:
    return {
        "type": "function",
        "name": "work",
        "description": "A benchmark function.",
        "parameters": {
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
            "additionalProperties": False,
        },
    }


class Work:
    """The function every contender serves; counts how often it really ran."""

    def __init__(self, sleep_seconds: float) -> None:
        self.sleep_seconds = sleep_seconds
        self.runs = 0
        self._lock = threading.Lock()

    def run(self, n: int) -> str:
        with self._lock:
            self.runs += 1
        if self.sleep_seconds:
            time.sleep(self.sleep_seconds)
        return f"done {n}"

    async def run_async(self, n: int) -> str:
        self.runs += 1
        if self.sleep_seconds:
            await asyncio.sleep(self.sleep_seconds)
        return f"done {n}"


def _store(contender: str, directory: str) -> ResultStore:
    if contender == "ours_memory":
        return MemoryResultStore()
    return SQLiteResultStore(Path(directory) / "calls.db")


def _create_idle_session(client: Client) -> str:
    """A Session whose first Turn (scripted to call nothing) has ended."""
    session = client.sessions.create(
        agent={"model": "scripted", "tools": [_tool_declaration()]}, input="Get ready."
    )
    return _wait_idle(client, session.id)


def _wait_idle(client: Client, session_id: str) -> str:
    deadline = time.monotonic() + 30
    while client.sessions.retrieve(session_id).status != "idle":
        if time.monotonic() > deadline:
            raise RuntimeError(f"Session {session_id} did not become idle")
        time.sleep(0.005)
    return session_id


# -- one Session, Turn after Turn ---------------------------------------------------------


def turns(args: dict[str, Any]) -> dict[str, Any]:
    """``turns`` Turns of one Session in a row; returns each Turn's wall and CPU time
    (of this process, all its threads)."""
    contender: str = args["contender"]
    work = Work(args.get("sleep_seconds", 0.0))
    with tempfile.TemporaryDirectory() as directory:
        client = Client(base_url=args["base_url"], api_key=args["api_key"])
        session_id = _create_idle_session(client)
        run_turn = _turn_driver(contender, client, args, work, directory)
        walls: list[float] = []
        cpus: list[float] = []
        for number in range(args["turns"]):
            started, cpu_started = time.perf_counter(), time.process_time()
            run_turn(session_id, f"Turn {number}")
            walls.append(time.perf_counter() - started)
            cpus.append(time.process_time() - cpu_started)
        client.close()
    return {"turn_seconds": walls, "turn_cpu_seconds": cpus, "runs": work.runs}


def _turn_driver(
    contender: str, client: Client, args: dict[str, Any], work: Work, directory: str
) -> Callable[[str, str], None]:
    if contender in ("ours_sqlite", "ours_memory", "ours_sqlite_idempotent"):
        idempotent = contender == "ours_sqlite_idempotent"
        runner = FunctionRunner(
            client,
            store=_store(contender, directory),
            max_concurrency=8,
            idempotent_fast_path=idempotent,
        )
        declare = runner.function(
            name="work", description="A benchmark function.", idempotent=idempotent
        )
        declare(work.run)

        def ours(session_id: str, text: str) -> None:
            result = runner.run_turn(session_id, text, timeout=RUN_TIMEOUT)
            if result.status != "completed":
                raise RuntimeError(f"Turn ended {result.status}")

        return ours
    if contender in ("ours_async_memory", "ours_async_sqlite"):
        # The async runner's loop on a thread of its own, driven from this one: what
        # FunctionRunner would cost as a facade over that loop (docs/runner.md).
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()
        async_client = AsyncClient(base_url=args["base_url"], api_key=args["api_key"])
        store = _store(contender.replace("_async", ""), directory)
        async_runner = AsyncFunctionRunner(async_client, store=store, max_concurrency=8)
        async_runner.function(name="work", description="A benchmark function.")(work.run)

        def ours_async(session_id: str, text: str) -> None:
            running = async_runner.run_turn(session_id, text, timeout=RUN_TIMEOUT)
            result = asyncio.run_coroutine_threadsafe(running, loop).result()
            if result.status != "completed":
                raise RuntimeError(f"Turn ended {result.status}")

        return ours_async
    if contender == "openai":
        from openai import OpenAI

        official = OpenAI(base_url=args["base_url"], api_key=args["api_key"])
        handlers = {"work": lambda arguments: work.run(**arguments)}

        def helper(session_id: str, text: str) -> None:
            with official.beta.agents.sessions.stream(
                session_id, input=text, tool_handlers=handlers
            ) as stream:
                stream.until_done()

        return helper
    if contender in ("raw", "raw_durable"):
        http = httpx.Client(
            base_url=args["base_url"],
            headers={"Authorization": f"Bearer {args['api_key']}", "OpenAI-Beta": "agents=v1"},
            timeout=RUN_TIMEOUT,
        )
        journal = _Journal(Path(directory) / "raw.db") if contender == "raw_durable" else None

        def raw(session_id: str, text: str) -> None:
            _raw_turn(http, session_id, text, work, journal)

        return raw
    raise ValueError(f"unknown contender {contender!r}")


class _Journal:
    """The two synced commits of durable serving, with nothing else: a row inserted
    before the call runs and its result written before it is posted."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("CREATE TABLE calls (call_id TEXT PRIMARY KEY, result TEXT)")

    def started(self, call_id: str) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        self._db.execute("INSERT INTO calls (call_id) VALUES (?)", (call_id,))
        self._db.execute("COMMIT")

    def finished(self, call_id: str, result: dict[str, Any]) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        self._db.execute(
            "UPDATE calls SET result = ? WHERE call_id = ?", (json.dumps(result), call_id)
        )
        self._db.execute("COMMIT")


def _raw_turn(
    http: httpx.Client, session_id: str, text: str, work: Work, journal: _Journal | None
) -> None:
    path = f"/agents/sessions/{session_id}/events"
    with http.stream("GET", path, headers={"Accept": "text/event-stream"}) as stream:
        message = {"role": "user", "content": [{"type": "input_text", "text": text}]}
        http.post(
            path, json={"events": [{"type": "agent.session.input.message", "input": [message]}]}
        )
        for line in stream.iter_lines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            kind = event["type"]
            if kind == "agent.session.turn.item.added" and event["item"]["type"] == "function_call":
                item = event["item"]
                if journal is not None:
                    journal.started(item["call_id"])
                result = {
                    "type": TOOL_RESULT,
                    "turn_id": item["turn_id"],
                    "call_id": item["call_id"],
                    "success": True,
                    "output": work.run(**item["arguments"]),
                }
                if journal is not None:
                    journal.finished(item["call_id"], result)
                http.post(path, json={"events": [result]}).raise_for_status()
            elif kind in ("agent.session.turn.completed", "agent.session.turn.failed"):
                return


# -- many Sessions in one process --------------------------------------------------------


def many(args: dict[str, Any]) -> dict[str, Any]:
    """One Turn on each of ``sessions`` idle Sessions, all at once."""
    contender: str = args["contender"]
    work = Work(0.0)
    client = Client(base_url=args["base_url"], api_key=args["api_key"])
    session_ids = [_create_idle_session(client) for _ in range(args["sessions"])]
    client.close()
    if contender in ("ours_async_sqlite", "ours_async_memory"):
        with tempfile.TemporaryDirectory() as directory:
            store = _store(contender.replace("_async", ""), directory)
            seconds = asyncio.run(_many_ours(args, session_ids, work, store))
    elif contender == "openai_threads":
        seconds = _many_openai(args, session_ids, work)
    else:
        raise ValueError(f"unknown contender {contender!r}")
    return {"seconds": seconds, "runs": work.runs}


async def _many_ours(
    args: dict[str, Any], session_ids: list[str], work: Work, store: ResultStore
) -> float:
    async with AsyncClient(base_url=args["base_url"], api_key=args["api_key"]) as client:
        runner = AsyncFunctionRunner(client, store=store, max_concurrency=64)
        runner.function(name="work", description="A benchmark function.")(work.run_async)
        started = time.perf_counter()
        results = await asyncio.gather(
            *(runner.run_turn(sid, "Go.", timeout=RUN_TIMEOUT) for sid in session_ids)
        )
        seconds = time.perf_counter() - started
        await runner.close()
    failed = [r for r in results if r.status != "completed"]
    if failed:
        raise RuntimeError(f"{len(failed)} Turns did not complete")
    return seconds


def _many_openai(args: dict[str, Any], session_ids: list[str], work: Work) -> float:
    from openai import OpenAI

    official = OpenAI(base_url=args["base_url"], api_key=args["api_key"])
    handlers = {"work": lambda arguments: work.run(**arguments)}
    errors: list[BaseException] = []

    def serve(session_id: str) -> None:
        try:
            with official.beta.agents.sessions.stream(
                session_id, input="Go.", tool_handlers=handlers
            ) as stream:
                stream.until_done()
        except BaseException as exc:  # reported below, not swallowed
            errors.append(exc)

    threads = [threading.Thread(target=serve, args=(sid,)) for sid in session_ids]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{len(errors)} Sessions failed, first: {errors[0]!r}")
    return seconds


# -- recovery after a restart --------------------------------------------------------------


def crash_leftovers(args: dict[str, Any]) -> dict[str, Any]:
    """What a crashed runner leaves: calls pending on the server whose results it saved
    (``COMPLETED`` in the store) but never posted."""
    client = Client(base_url=args["base_url"], api_key=args["api_key"])
    store = SQLiteResultStore(args["store"])
    owner = new_owner_id()
    session_ids = []
    for _ in range(args["sessions"]):
        session = client.sessions.create(
            agent={"model": "scripted", "tools": [_tool_declaration()]}, input="Go."
        )
        session_ids.append(session.id)
    saved = 0
    for session_id in session_ids:
        deadline = time.monotonic() + 30
        while not (session := client.sessions.retrieve(session_id)).pending_function_calls:
            if time.monotonic() > deadline:
                raise RuntimeError(f"Session {session_id} asked for no calls")
            time.sleep(0.005)
        for action in session.pending_function_calls:
            key = CallKey(session_id, action.turn_id, action.call_id)
            store.claim(
                key,
                function_name=action.name,
                arguments_hash=arguments_hash(action.arguments),
                owner=owner,
                lease_seconds=60,
            )
            result = {"type": TOOL_RESULT, "turn_id": action.turn_id, "call_id": action.call_id}
            store.save_result(key, {**result, "success": True, "output": "saved"}, owner=owner)
            saved += 1
    store.close()
    client.close()
    return {"session_ids": session_ids, "saved": saved}


def recover(args: dict[str, Any]) -> dict[str, Any]:
    """A restarted process settles every Session from the store, all at once."""
    work = Work(0.0)

    async def run() -> tuple[float, int]:
        async with AsyncClient(base_url=args["base_url"], api_key=args["api_key"]) as client:
            runner = AsyncFunctionRunner(client, store=SQLiteResultStore(args["store"]))
            runner.function(name="work", description="A benchmark function.")(work.run_async)
            started = time.perf_counter()
            reports = await asyncio.gather(*(runner.recover(sid) for sid in args["session_ids"]))
            seconds = time.perf_counter() - started
            await runner.close()
        return seconds, sum(r.results_resubmitted for r in reports)

    seconds, resubmitted = asyncio.run(run())
    client = Client(base_url=args["base_url"], api_key=args["api_key"])
    waiting = sum(
        client.sessions.retrieve(sid).status == "requires_action" for sid in args["session_ids"]
    )
    client.close()
    return {"seconds": seconds, "resubmitted": resubmitted, "runs": work.runs, "waiting": waiting}


# -- a long-running process ------------------------------------------------------------


def soak(args: dict[str, Any]) -> dict[str, Any]:
    """Turn after Turn in one process, moving to a new Session every
    ``turns_per_session`` Turns; RSS when the calls run reach each checkpoint."""
    work = Work(0.0)
    checkpoints: list[int] = sorted(args["checkpoints"])
    rss: dict[str, float] = {}
    threads: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as directory:
        client = Client(base_url=args["base_url"], api_key=args["api_key"])
        runner = FunctionRunner(client, store=SQLiteResultStore(Path(directory) / "calls.db"))
        runner.function(name="work", description="A benchmark function.")(work.run)
        started = time.perf_counter()
        turns = 0
        session_id = _create_idle_session(client)
        for checkpoint in checkpoints:
            while work.runs < checkpoint:
                if turns and turns % args["turns_per_session"] == 0:
                    session_id = _create_idle_session(client)
                runner.run_turn(session_id, "More.", timeout=RUN_TIMEOUT)
                turns += 1
            rss[str(checkpoint)] = _current_rss_mb()
            threads[str(checkpoint)] = threading.active_count()
        seconds = time.perf_counter() - started
        runner.close()
        client.close()
    return {
        "rss_mb": rss,
        "threads": threads,
        "runs": work.runs,
        "turns": turns,
        "seconds": seconds,
    }


def _current_rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


WORKLOADS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "turns": turns,
    "many": many,
    "crash_leftovers": crash_leftovers,
    "recover": recover,
    "soak": soak,
}


def main() -> None:
    name, raw_args = sys.argv[1], json.loads(sys.argv[2])
    result = WORKLOADS[name](raw_args)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result["peak_rss_mb"] = usage.ru_maxrss / 1024
    result["cpu_seconds"] = usage.ru_utime + usage.ru_stime
    print(json.dumps(result))


if __name__ == "__main__":
    main()
