"""SIGINT/SIGTERM for daemons: installed once per process, shared, then restored.

Several ``serve(until="forever")`` may run at once (threads, or tasks on one loop).
The handler is installed when the first starts and the previous handler restored when
the last ends, so one serve ending never leaves the others without it.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["on_shutdown_signal"]

logger = logging.getLogger("openagentcore.runner")

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_lock = threading.Lock()
_callbacks: dict[int, Callable[[], None]] = {}
_previous: dict[signal.Signals, Any] = {}
_next_token = 0


def _handler(signum: int, frame: FrameType | None) -> None:
    logger.info("Received signal %s; finishing in-flight calls", signum)
    for callback in list(_callbacks.values()):
        callback()


@contextmanager
def on_shutdown_signal(callback: Callable[[], None]) -> Iterator[None]:
    """Call ``callback`` (which must be safe in a signal handler) on SIGINT/SIGTERM
    while the block runs. Outside the main thread signals cannot be handled: no-op."""
    global _next_token
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with _lock:
        _next_token += 1
        token = _next_token
        if not _callbacks:
            for sig in _SIGNALS:
                _previous[sig] = signal.signal(sig, _handler)
        _callbacks[token] = callback
    try:
        yield
    finally:
        with _lock:
            del _callbacks[token]
            if not _callbacks:
                for sig, previous in _previous.items():
                    signal.signal(sig, previous)
                _previous.clear()
