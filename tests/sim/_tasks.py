"""Coroutines on the simulated clock: futures, and tasks that step them.

The runner's driver loop (:mod:`openagentcore.runner._driver`) and its serving code are
async. Here they run with no event loop and no threads: a coroutine awaits a
:class:`SimFuture`, and when the world's scheduler resolves that future the coroutine
is resumed at that virtual instant. One seed therefore still fixes every interleaving.
The futures answer what the loop asks of ``asyncio.Future`` (its ``Future`` protocol),
and a task can be cancelled as an asyncio task is.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from ._world import SimWorker, World

__all__ = ["SimFuture", "Task", "Violation"]

T = TypeVar("T")


class Violation(AssertionError):
    """A promise of the runner did not hold in this history."""


class SimFuture(Generic[T]):
    """A value the scheduler provides later; the first outcome set wins."""

    __slots__ = ("_callbacks", "_cancelled", "_done", "_error", "_value")

    def __init__(self) -> None:
        self._done = False
        self._cancelled = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[SimFuture[T]], object]] = []

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> bool:
        if self._done:
            return False
        self._cancelled = True
        self._settle(None, asyncio.CancelledError())
        return True

    def set_result(self, value: T) -> None:
        self._settle(value, None)

    def set_exception(self, error: BaseException) -> None:
        self._settle(None, error)

    def _settle(self, value: Any, error: BaseException | None) -> None:
        if self._done:
            return
        self._done, self._value, self._error = True, value, error
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def add_done_callback(self, callback: Callable[[SimFuture[T]], object], /) -> None:
        if self._done:
            callback(self)
        else:
            self._callbacks.append(callback)

    def exception(self) -> BaseException | None:
        return None if self._cancelled else self._error

    def result(self) -> T:
        if self._error is not None:
            raise self._error
        value: T = self._value
        return value

    def __await__(self) -> Generator[SimFuture[T], None, T]:
        if not self._done:
            yield self
        return self.result()


class Task(SimFuture[Any]):
    """Steps one coroutine of a worker: started at the current instant, resumed at the
    instant the future it awaits resolves. A dead worker's tasks never run again.
    ``cancel()`` throws ``CancelledError`` into the coroutine where it waits, as
    asyncio does; the task ends cancelled unless the coroutine goes on."""

    def __init__(
        self, world: World, worker: SimWorker, coroutine: Coroutine[Any, Any, Any]
    ) -> None:
        super().__init__()
        self.world = world
        self.worker = worker
        self.coroutine = coroutine
        #: Bumped at every wait, so a future that resolves after a cancellation does not
        #: resume the coroutine a second time.
        self._wait = 0
        #: Each task runs in a copy of the context it was started in, as asyncio's do.
        self._context = contextvars.copy_context()
        #: The coroutine is executing now (it cannot be closed until it waits).
        self._running = False
        world.at(world.now, lambda: self._step(None))

    def _step(self, throw: BaseException | None) -> None:
        if self._done or not self.worker.alive:
            return
        self._wait += 1
        self._running = True
        try:
            if throw is not None:
                awaited = self._context.run(self.coroutine.throw, throw)
            else:
                awaited = self._context.run(self.coroutine.send, None)
        except StopIteration as stop:
            self._settle(stop.value, None)
            return
        except asyncio.CancelledError:
            self._cancelled = True
            self._settle(None, asyncio.CancelledError())
            return
        except Violation:
            raise
        except BaseException as exc:  # SystemExit in a function's task, as asyncio keeps it
            self._settle(None, exc)
            return
        finally:
            self._running = False
        if not self.worker.alive:  # killed while it ran: closed now that it waits
            self._context.run(self.coroutine.close)
            return
        if not isinstance(awaited, SimFuture):
            raise Violation(f"seed {self.world.seed}: the runner awaited {awaited!r}")
        wait = self._wait
        awaited.add_done_callback(lambda _: self._resume(wait))

    def _resume(self, wait: int) -> None:
        if wait == self._wait:
            self.world.at(self.world.now, lambda: self._step(None))

    def cancel(self) -> bool:
        if self._done:
            return False
        self._wait += 1  # what it awaits no longer resumes it
        self.world.at(self.world.now, lambda: self._step(asyncio.CancelledError()))
        return True

    def kill(self) -> None:
        """The worker died: the coroutine is closed where it waits (its ``finally``
        blocks only touch the dead worker's own state). Call :meth:`end` on every task
        of the worker first: a ``finally`` that awaits another task then finds it done
        instead of waiting on it, which a closing coroutine may not."""
        self.end()
        if not self._running:
            self._context.run(self.coroutine.close)

    def end(self) -> None:
        """Done, with no outcome to tell anyone: the worker is dead."""
        self._done = True
        self._cancelled = True
        self._error = asyncio.CancelledError()
