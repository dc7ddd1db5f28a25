"""The emulator in its own process, instrumented for the benchmarks.

Started by :class:`Emulator`; it prints one JSON line with its URL and key, then answers
commands read from stdin, one per line, with one JSON line each:

- ``timings``: for every call whose result was accepted since the last ``timings``,
  seconds from the moment the server issued the ``function_call`` to the moment it
  admitted the result; both clocks are the server's, so every contender is measured
  with the same ruler.
- ``stats``: events published so far, the server's CPU seconds, and how many result
  submissions it refused with 409.
- ``streams``: the event streams open now, per Session with any.

Running it in another process keeps the client's RSS and CPU its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from openagentcore.local import Faults, FunctionCall, LocalCore, Scenario, TurnScript
from openagentcore.local._engine import ApiError, Engine
from openagentcore.local._model import CallFunctions
from openagentcore.local._store import TurnRecord


class _Recorder:
    """Wraps the Engine's issue, admit and publish steps with timestamps and counters."""

    def __init__(self) -> None:
        self.issued: dict[str, float] = {}
        self.latencies: list[float] = []
        self.events = 0
        self.conflicts = 0

    def install(self) -> None:
        issue_calls = Engine._issue_calls
        submit_input = Engine.submit_input
        emit = Engine._emit
        recorder = self

        def timed_issue(engine: Engine, turn: TurnRecord, action: CallFunctions) -> None:
            issue_calls(engine, turn, action)
            issued_at = time.perf_counter()
            for call_id in turn.step_call_ids:
                recorder.issued.setdefault(call_id, issued_at)

        def timed_submit(
            engine: Engine,
            session_id: str,
            events: list[dict[str, Any]],
            idempotency_key: str | None,
        ) -> None:
            try:
                submit_input(engine, session_id, events, idempotency_key)
            except ApiError as error:
                if error.status == 409:
                    recorder.conflicts += 1
                raise
            admitted_at = time.perf_counter()
            for event in events:
                issued_at = recorder.issued.pop(str(event.get("call_id")), None)
                if issued_at is not None:
                    recorder.latencies.append(admitted_at - issued_at)

        def counted_emit(
            engine: Engine, session_id: str, payload: dict[str, Any]
        ) -> dict[str, Any]:
            recorder.events += 1
            return emit(engine, session_id, payload)

        Engine._issue_calls = timed_issue  # type: ignore[method-assign,assignment]
        Engine.submit_input = timed_submit  # type: ignore[method-assign,assignment]
        Engine._emit = counted_emit  # type: ignore[method-assign,assignment]

    def answer(self, command: str) -> dict[str, Any]:
        if command == "timings":
            latencies, self.latencies = self.latencies, []
            return {"latencies": latencies}
        if command == "stats":
            times = os.times()
            return {
                "events": self.events,
                "cpu_seconds": times.user + times.system,
                "conflicts": self.conflicts,
            }
        return {"error": f"unknown command {command!r}"}


def work_scenario(
    turns: int,
    steps: int,
    calls_per_step: int,
    *,
    ready_turn: bool = True,
    distinct_functions: bool = False,
) -> Scenario:
    """``turns`` Turns of ``steps`` rounds of ``calls_per_step`` calls, after a first Turn
    that calls nothing (so the Session is idle, ready for any contender) unless
    ``ready_turn`` is false.

    Calls go to ``work(n)``, or with ``distinct_functions`` to ``work_0``, ``work_1``, ...
    (one name per call of a Turn) with arguments generated from the Session's declaration,
    so a Session can make every call's arguments its own.
    """

    def call(index: int) -> FunctionCall:
        if distinct_functions:
            return FunctionCall(f"work_{index}")
        return FunctionCall("work", {"n": index % calls_per_step})

    work_turn = TurnScript(
        steps=tuple(
            tuple(call(step * calls_per_step + n) for n in range(calls_per_step))
            for step in range(steps)
        ),
        answer="Finished.",
    )
    first = [TurnScript(answer="Ready.")] if ready_turn else []
    return Scenario(turns=(*first, *([work_turn] * turns)))


def main() -> None:
    config = json.loads(sys.argv[1])
    recorder = _Recorder()
    recorder.install()
    core = LocalCore(
        scenario=work_scenario(**config["scenario"]),
        faults=Faults(**config.get("faults", {})),
        keepalive_interval=1.0,
    )
    with core:
        print(json.dumps({"base_url": core.base_url, "api_key": core.api_key}), flush=True)
        for line in sys.stdin:
            command = line.strip()
            if command == "streams":
                print(json.dumps(core.stream_counts()), flush=True)
            elif command:
                print(json.dumps(recorder.answer(command)), flush=True)


class Emulator:
    """A handle on the emulator subprocess: ``with Emulator(scenario) as emu:``."""

    def __init__(self, scenario: dict[str, Any], faults: dict[str, Any] | None = None) -> None:
        config = json.dumps({"scenario": scenario, "faults": faults or {}})
        self._process = subprocess.Popen(
            [sys.executable, str(Path(__file__)), config],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        started = self._read()
        self.base_url: str = started["base_url"]
        self.api_key: str = started["api_key"]
        self.pid = self._process.pid

    def _read(self) -> dict[str, Any]:
        stdout: IO[str] | None = self._process.stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            raise RuntimeError("the emulator subprocess exited; see its output above")
        result: dict[str, Any] = json.loads(line)
        return result

    def ask(self, command: str) -> dict[str, Any]:
        stdin = self._process.stdin
        assert stdin is not None
        stdin.write(command + "\n")
        stdin.flush()
        return self._read()

    def latencies(self) -> list[float]:
        """Issue-to-admit seconds of the calls settled since the last call."""
        values: list[float] = self.ask("timings")["latencies"]
        return values

    def stats(self) -> tuple[int, float]:
        """(events published, server CPU seconds) so far."""
        answer = self.ask("stats")
        return int(answer["events"]), float(answer["cpu_seconds"])

    def conflicts(self) -> int:
        """Result submissions the server refused with 409 so far."""
        return int(self.ask("stats")["conflicts"])

    def streams(self) -> dict[str, int]:
        """Event streams open now, per Session with any."""
        return {session: int(count) for session, count in self.ask("streams").items()}

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def __enter__(self) -> Emulator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


if __name__ == "__main__":
    main()
