"""The examples run end to end against the emulator they start, as README.md says.

Each runs in its own process, exactly as a user would start it, with the environment
cleared of any real server settings.
"""

from __future__ import annotations

import os
import re
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
