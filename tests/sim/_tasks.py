"""Coroutines on the simulated clock: futures, and a trampoline that steps them.

The runner's serving code (``serve``, ``run_turn``, ``recover`` and the requests effects
make) is async. Here it runs with no event loop and no threads: a coroutine awaits a
:class:`SimFuture`, and when the world's scheduler resolves that future the coroutine
is resumed at that virtual instant. One seed therefore still fixes every interleaving.
"""

from __future__ import annotations

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

    __slots__ = ("_callbacks", "_done", "_error", "_value")

    def __init__(self) -> None:
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[SimFuture[T]], None]] = []

    @property
    def done(self) -> bool:
        return self._done

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

    def add_done_callback(self, callback: Callable[[SimFuture[T]], None]) -> None:
        if self._done:
            callback(self)
        else:
            self._callbacks.append(callback)

    def result(self) -> T:
        if self._error is not None:
            raise self._error
        value: T = self._value
        return value

    def __await__(self) -> Generator[SimFuture[T], None, T]:
        if not self._done:
            yield self
        return self.result()


class Task:
    """Steps one coroutine of a worker: started at the current instant, resumed at the
    instant the future it awaits resolves. A dead worker's tasks never run again."""

    def __init__(
        self,
        world: World,
        worker: SimWorker,
        coroutine: Coroutine[Any, Any, Any],
        on_done: Callable[[Any, Exception | None], None],
    ) -> None:
        self.world = world
        self.worker = worker
        self.coroutine = coroutine
        self.on_done = on_done
        self.finished = False
        world.at(world.now, self._step)

    def _step(self) -> None:
        if self.finished or not self.worker.alive:
            return
        try:
            awaited = self.coroutine.send(None)
        except StopIteration as stop:
            self._finish(stop.value, None)
            return
        except Violation:
            raise
        except Exception as exc:
            self._finish(None, exc)
            return
        if not isinstance(awaited, SimFuture):
            raise Violation(f"seed {self.world.seed}: the serving code awaited {awaited!r}")
        awaited.add_done_callback(self._resume)

    def _resume(self, _: SimFuture[Any]) -> None:
        self.world.at(self.world.now, self._step)

    def _finish(self, value: Any, error: Exception | None) -> None:
        self.finished = True
        self.on_done(value, error)

    def kill(self) -> None:
        """The worker died: the coroutine is closed where it waits (its ``finally``
        blocks only touch the dead worker's own state)."""
        if not self.finished:
            self.finished = True
            self.coroutine.close()
