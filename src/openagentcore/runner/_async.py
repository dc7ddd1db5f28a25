"""``AsyncFunctionRunner``: the driver loop (:mod:`._driver`) on asyncio.

The loop is written once and the simulator runs it too; this module only chooses the
real edges: the event loop, ``time.monotonic`` and thread pools of their own for the
store, the application's hooks and plain functions.
"""

from __future__ import annotations

from typing_extensions import Unpack

from .._client import AsyncClient
from ._base import RunnerOptions
from ._driver import Driver
from ._runtime import AsyncioRuntime

__all__ = ["AsyncFunctionRunner"]


class AsyncFunctionRunner(Driver):
    """The asyncio twin of :class:`~openagentcore.FunctionRunner`.

    Accepts coroutine functions and plain functions (run in worker threads). One runner
    can serve many Sessions at once: ``max_concurrency`` bounds the calls running
    across all of them.
    """

    default_max_concurrency = 16

    def __init__(self, client: AsyncClient, **options: Unpack[RunnerOptions]) -> None:
        super().__init__(**options)
        self.client = client
        self._rt = AsyncioRuntime(self.max_concurrency)
        self._start_driver()

    async def __aenter__(self) -> AsyncFunctionRunner:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
