"""The edges of the runner's one driver loop: clock, tasks, threads and waits.

:class:`~openagentcore.runner._driver.Driver` decides and waits only through a
:class:`Runtime`. :class:`AsyncioRuntime` is the real one (the event loop and thread
pools); the simulator supplies another on virtual time, so the loop it checks is the
product's own, not a copy.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import math
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Generic, Protocol, TypeVar

from .._network import Wakeup

__all__ = ["AsyncioRuntime", "DaemonThreads", "Future", "Inbox", "Lane", "Runtime"]

T = TypeVar("T")
M = TypeVar("M")
T_co = TypeVar("T_co", covariant=True)

#: Threads for the runner's own store calls (claims, saves, lease renewals).
STORE_THREADS = 16
#: Threads for the application's hooks (``on_in_doubt``, ``on_action``): never the
#: store's, so hooks that block cannot delay a lease renewal.
HOOK_THREADS = 2


class Lane(enum.Enum):
    """Which threads blocking work runs on. Each lane has threads of its own, so work of
    one kind never waits behind another's."""

    STORE = "store"
    HOOKS = "hooks"
    FUNCTIONS = "functions"


class Future(Protocol[T_co]):
    """What the loop needs of a future or a task (``asyncio.Future`` is one)."""

    def done(self) -> bool: ...

    def cancel(self) -> bool: ...

    def cancelled(self) -> bool: ...

    def result(self) -> T_co: ...

    def exception(self) -> BaseException | None: ...

    def add_done_callback(self, fn: Callable[[Any], object], /) -> None: ...

    def __await__(self) -> Generator[Any, None, T_co]: ...


class Settable(Future[T], Protocol[T]):
    def set_result(self, result: T, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


class Inbox(Protocol[M]):
    """Messages for the loop. ``put`` is safe from any thread of the runtime;
    ``put_threadsafe`` from a signal handler too."""

    def put(self, message: M) -> None: ...

    def put_threadsafe(self, message: M) -> None: ...

    def drain(self, wait: float) -> Awaitable[list[M]]:
        """Every message waiting, after waiting up to ``wait`` seconds for the first."""
        ...


class Runtime(Protocol):
    """Everything the loop reads or starts that is not a decision."""

    def now(self) -> float:
        """The runner's monotonic clock, in seconds."""
        ...

    def jitter(self) -> float:
        """A random number in [0, 1): the spread of reconnect delays."""
        ...

    def future(self) -> Settable[Any]: ...

    def inbox(self) -> Inbox[Any]: ...

    def spawn(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Run ``coroutine`` concurrently (a task); cancelling the future cancels it."""
        ...

    def offload(self, lane: Lane, work: Callable[[], T]) -> Future[T]:
        """Run blocking ``work`` on ``lane``'s threads."""
        ...

    def first(self, future: Future[Any], deadline: float | None) -> Awaitable[bool]:
        """Wait until ``future`` is done (True) or the clock reads ``deadline`` (False),
        whichever comes first; the future's outcome is left to the caller."""
        ...

    def sleep(self, seconds: float) -> Awaitable[None]: ...

    def close(self, last: Callable[[], None]) -> Awaitable[None]:
        """Stop the runtime's threads once their work is done (function threads are
        left to finish on their own: a function may run long), then run ``last``."""
        ...


class _AsyncioInbox(Generic[M]):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._items: deque[M] = deque()
        self._arrived = Wakeup()

    def put(self, message: M) -> None:
        self._items.append(message)
        if threading.get_ident() == self._loop_thread:
            self._arrived.wake()  # no wake-up pipe needed on the loop's own thread
        else:
            self._loop.call_soon_threadsafe(self._arrived.wake)

    def put_threadsafe(self, message: M) -> None:
        self._items.append(message)
        self._loop.call_soon_threadsafe(self._arrived.wake)

    async def drain(self, wait: float) -> list[M]:
        # Not ``asyncio.wait_for``: woken as the loop's task is cancelled, it can
        # swallow the cancellation, and a loop that runs on keeps ``asyncio.run`` from
        # returning.
        if not self._items:
            with contextlib.suppress(TimeoutError):
                await self._arrived.wait(wait if math.isfinite(wait) else None)
        items = []
        while self._items:  # one at a time: a put from another thread is never cleared
            items.append(self._items.popleft())
        return items


class DaemonThreads(Executor):
    """A pool of daemon threads, for the application's functions.

    ``ThreadPoolExecutor`` joins its threads when the interpreter exits, so a function
    that overran its timeout, still running after ``close()`` returned, would keep the
    program alive for its whole run. A closed runner has given up on such a function (a
    restarted runner settles its call), so its thread must not hold the program. It also
    takes work while the interpreter shuts down, which ``ThreadPoolExecutor`` refuses,
    so a serve that outlives the main thread still runs its calls.
    """

    def __init__(self, max_workers: int, name: str) -> None:
        self._max_workers = max_workers
        self._name = name
        self._work: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # SystemExit too: the caller hears of it
                future.set_exception(exc)
            else:
                future.set_result(result)

        with self._lock:
            if self._closed:
                raise RuntimeError("cannot run new functions after the runner closed")
            self._work.put(run)
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._max_workers:
                thread = threading.Thread(
                    target=self._serve, name=f"{self._name}_{len(self._threads)}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
        return future

    def _serve(self) -> None:
        while True:
            run = self._work.get()
            if run is None:
                return
            run()
            del run
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._work.put(None)
        if wait:
            for thread in threads:
                thread.join()


class AsyncioRuntime:
    """The real edges: the running event loop, ``time.monotonic`` and thread pools."""

    def __init__(self, max_functions: int) -> None:
        # Plain functions get threads of their own: in asyncio's shared default pool
        # (a few threads on a small machine) they would run fewer than max_concurrency
        # at once and queue the runner's own store calls behind them.
        self._pools: dict[Lane, Executor] = {
            Lane.STORE: ThreadPoolExecutor(STORE_THREADS, thread_name_prefix="oac-store"),
            Lane.HOOKS: ThreadPoolExecutor(HOOK_THREADS, thread_name_prefix="oac-hooks"),
            Lane.FUNCTIONS: DaemonThreads(max_functions, "openagentcore-call"),
        }

    def now(self) -> float:
        return time.monotonic()

    def jitter(self) -> float:
        return random.random()

    def future(self) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    def inbox(self) -> _AsyncioInbox[Any]:
        return _AsyncioInbox(asyncio.get_running_loop())

    def spawn(self, coroutine: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        return asyncio.ensure_future(coroutine)

    def offload(self, lane: Lane, work: Callable[[], T]) -> asyncio.Future[T]:
        return asyncio.get_running_loop().run_in_executor(self._pools[lane], work)

    async def first(self, future: Future[Any], deadline: float | None) -> bool:
        left = None if deadline is None else max(0.0, deadline - self.now())
        await asyncio.wait({future}, timeout=left)
        return future.done()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def close(self, last: Callable[[], None]) -> None:
        self._pools[Lane.FUNCTIONS].shutdown(wait=False)
        for lane in (Lane.HOOKS, Lane.STORE):
            await asyncio.to_thread(self._pools[lane].shutdown, wait=True)
        await asyncio.to_thread(last)
