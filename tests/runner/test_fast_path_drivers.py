"""The idempotent fast path in each driver: a result is posted as it is saved.

The core asks for the save and the POST of an idempotent function's result in the same
round (tests/runner/test_idempotent_fast_path.py). Here the drivers must carry them out
side by side: the sync runner runs a round's store calls on the thread that has the
news, after which it would run a POST kept for that same thread, so the POST goes to
another thread first. The store below holds each save until the POST has reached the
server, so a POST queued behind its save waits out the store's patience instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from openagentcore.local import FunctionCall, LocalCore
from openagentcore.store import MemoryResultStore

from ._support import Harness, one_turn

MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]

#: How long a save waits for its POST: far beyond what a POST takes, even on a loaded
#: machine, and what a test of a driver that holds the POST back would spend.
PATIENCE = 10.0


class _SaveWaitsForThePost(MemoryResultStore):
    def __init__(self) -> None:
        super().__init__()
        #: Whether the runner's result POST has been answered (set once the harness is).
        self.posted: Callable[[], bool] = lambda: False
        #: For each save, whether that POST had been answered when it ended.
        self.saves: list[bool] = []

    def save_result(self, *args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + PATIENCE
        while not self.posted() and time.monotonic() < deadline:
            time.sleep(0.005)
        self.saves.append(self.posted())
        return super().save_result(*args, **kwargs)


def test_an_idempotent_result_is_posted_without_waiting_for_its_save(
    make_core: MakeCore, make_harness: MakeHarness
) -> None:
    store = _SaveWaitsForThePost()
    harness = make_harness(
        make_core(scenario=one_turn([FunctionCall("reserve", {"order": "o1"})])),
        store=store,
        idempotent_fast_path=True,
    )
    # The runner's client posts only results to the events path.
    store.posted = lambda: any(
        method == "POST" and path.endswith("/events") for method, path, _ in harness.responses
    )

    @harness.runner.function(idempotent=True)
    def reserve(order: str) -> str:
        """Reserve stock for an order (safe to repeat)."""
        return f"reserved {order}"

    session_id = harness.create_session()
    report = harness.serve(session_id)

    assert report.final_status == "idle"
    assert store.saves == [True], "the result's POST waited for its save"
