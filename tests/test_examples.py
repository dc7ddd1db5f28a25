"""The examples run end to end against the emulator they start, as README.md says.

Each runs in its own process, exactly as a user would start it, with the environment
cleared of any real server settings.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAGENTCORE_")}
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        stdin=subprocess.DEVNULL,  # the chat bot reads questions from stdin until EOF
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout + completed.stderr


def test_quickstart_serves_both_turns_and_prints_the_answer() -> None:
    output = run_example("quickstart.py")

    assert "First Turn settled: 3 calls run, status idle" in output
    assert "Second Turn completed" in output
    answer = re.search(r"^Answer: (.*)$", output, re.MULTILINE)
    assert answer is not None, output
    assert answer.group(1) not in ("", "None")


def test_recover_after_restart_charges_the_card_once() -> None:
    output = run_example("recover_after_restart.py")

    assert "1 in doubt, 0 calls run" in output
    assert "Session is idle" in output
    assert "Card charged 1 time(s)" in output


@pytest.mark.parametrize("sessions", [5])
def test_many_sessions_async_leaves_every_session_idle(sessions: int) -> None:
    output = run_example("many_sessions_async.py", "--sessions", str(sessions))

    assert re.search(rf"^{sessions} Sessions, \d+ calls in .*; {sessions} idle$", output, re.M)


def test_payments_bot_charges_once_across_a_kill_and_answers_the_call() -> None:
    output = run_example("payments_bot.py")

    assert "Worker 1 exited with -9 (killed by SIGKILL: True)" in output
    assert "charge attempt 1" in output
    assert "charge attempt 2" in output
    assert "1 found in doubt and re-run, Session idle" in output
    assert re.search(
        r"^Call answered \(completed\): charged 4200 cents for A-17 \(ch_1\)$", output, re.M
    )
    assert "Payment service: 2 charge request(s), 1 charge(s) made" in output


def test_chat_bot_streams_answers_and_keeps_its_session(tmp_path: Path) -> None:
    state = ["--state-dir", str(tmp_path)]
    first = run_example("chat_bot.py", *state, "--once", "Weather in Paris?")

    session = re.search(r"^New Session (\S+)$", first, re.M)
    assert session is not None, first
    assert "[calling weather('Paris'), attempt 1]" in first
    assert "bot> In Paris it is sunny, 21 °C right now, and the local time is 13:00." in first

    second = run_example("chat_bot.py", *state, "--once", "And Tokyo?")
    assert f"Back in Session {session.group(1)}" in second
    assert "bot> Tokyo today: cloudy, 18 °C." in second


def test_chat_bot_killed_mid_turn_resumes_the_session_and_finishes_the_turn(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAGENTCORE_")}
    args = ["--state-dir", str(tmp_path), "--once", "Weather in Paris?", "--slow", "60"]
    bot = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "chat_bot.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert bot.stdout is not None
        seen: list[str] = []
        for line in bot.stdout:  # the weather function is running when this prints
            seen.append(line)
            if "[calling weather('Paris'), attempt 1]" in line:
                break
        else:
            raise AssertionError(f"the bot never called weather: {seen} {bot.stderr}")
        bot.send_signal(signal.SIGKILL)
    finally:
        bot.kill()
        bot.communicate(timeout=30)
    assert bot.returncode == -signal.SIGKILL
    session = re.search(r"^New Session (\S+)$", "".join(seen), re.M)
    assert session is not None, seen

    output = run_example("chat_bot.py", "--state-dir", str(tmp_path))

    assert f"Resuming Session {session.group(1)}: a Turn was in progress" in output
    assert "[calling weather('Paris'), attempt 2]" in output
    assert "bot> In Paris it is sunny, 21 °C right now, and the local time is 13:00." in output


def test_fleet_workers_share_the_sessions_and_charge_each_order_once() -> None:
    output = run_example("fleet_workers.py", "--workers", "2", "--sessions", "4")

    assert "4 Sessions idle; served by" in output, output
    assert "4 charges, 0 repeated" in output, output
