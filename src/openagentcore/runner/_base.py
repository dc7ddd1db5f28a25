"""What the sync and async runners share: registration, options and message types."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

import pydantic
from typing_extensions import TypedDict

from .._retry import within
from ..resources._base import CallOptions
from ..store import ResultStore, new_owner_id, open_store
from ..store._records import owner_opened
from ..types import InputMessageEvent, MessageItem, UserMessage
from ._core import RunnerCore, Serve
from ._execution import Hooks
from ._observe import CallObserver
from ._output import parse_turn_output
from ._registry import DEFAULT_MAX_ATTEMPTS, FunctionRegistry, describe_function
from ._report import ServeReport, TurnResult
from ._results import ErrorFormatter
from ._types import ActionHandler, ErrorHook, InDoubtHandler, RunnerError

__all__ = ["RunnerBase", "RunnerError", "RunnerOptions", "ServeTimeout"]

F = TypeVar("F", bound=Callable[..., Any])
Until = Literal["idle", "forever"]


class RunnerOptions(TypedDict, total=False):
    """Options shared by :class:`FunctionRunner` and :class:`AsyncFunctionRunner`.

    - ``store``: a :class:`~openagentcore.ResultStore`, a SQLite path or a
      ``postgresql://`` URL (default: ``openagentcore-calls.db`` in the working directory).
    - ``max_concurrency``: functions running at once, across all Sessions served.
    - ``lease_seconds``: how long a claim holds without renewal; the runner renews it
      while the function runs. After it lapses another worker may treat the call as in
      doubt.
    - ``unknown_functions``: ``"leave"`` calls to functions not registered here pending
      for another worker, or ``"fail"`` them.
    - ``error_formatter``: turns a function's exception into the text the model sees
      (default: a generic text that reveals nothing).
    - ``on_error``: sees each exception locally.
    - ``on_in_doubt``: decides what to do with a call in doubt (default: fail it).
    - ``on_action``: sees required actions that are not function calls.
    - ``reconnect_max_delay``: cap of the stream reconnect backoff, in seconds.
    - ``poll_interval``: seconds between reads of a Session that waits on calls other
      workers hold.
    - ``shutdown_grace``: when a serve ends early (timeout, cancellation, Ctrl-C, an
      error), seconds it waits for its running functions to finish and their results
      to be saved and posted. Whatever is still running then goes on in the background
      until :meth:`close`.
    - ``unreachable_timeout``: seconds a ``serve(until="idle")``, ``run_turn`` or
      ``recover`` keeps trying to reach a server it cannot connect to before raising
      :class:`~openagentcore.APIConnectionError` (``until="forever"`` keeps trying and
      logs a WARNING now and then).
    - ``idempotent_fast_path``: start a function declared ``idempotent=True`` as its
      claim is sent and post its result as it is saved, rather than after each is
      durable (off by default: a crash between the POST and the save leaves its record
      without a result, and every worker following a Session may run such a call once
      as it claims it; see docs/runner.md).
    - ``tracer_provider``/``meter_provider``: OpenTelemetry providers for the runner's
      spans and metrics, instead of the global ones (needs ``openagentcore[otel]``).
    """

    store: ResultStore | str | os.PathLike[str] | None
    max_concurrency: int | None
    lease_seconds: float
    unknown_functions: Literal["leave", "fail"]
    error_formatter: ErrorFormatter | None
    on_error: ErrorHook | None
    on_in_doubt: InDoubtHandler | None
    on_action: ActionHandler | None
    reconnect_max_delay: float
    poll_interval: float
    shutdown_grace: float
    unreachable_timeout: float
    idempotent_fast_path: bool
    tracer_provider: Any
    meter_provider: Any


class ServeTimeout(TimeoutError):
    """``serve``/``run_turn`` did not finish by its ``timeout``.

    ``report`` holds what was done so far. Functions still running go on in the
    background; their results are saved and posted until the runner is closed.
    """

    def __init__(self, message: str, report: ServeReport) -> None:
        super().__init__(message)
        self.report = report


class RunnerBase:
    """Registration and configuration common to :class:`FunctionRunner` and
    :class:`AsyncFunctionRunner`."""

    #: Functions running at once when ``max_concurrency`` is not given.
    default_max_concurrency = 8

    def __init__(
        self,
        *,
        store: ResultStore | str | os.PathLike[str] | None = None,
        max_concurrency: int | None = None,
        lease_seconds: float = 60.0,
        unknown_functions: Literal["leave", "fail"] = "leave",
        error_formatter: ErrorFormatter | None = None,
        on_error: ErrorHook | None = None,
        on_in_doubt: InDoubtHandler | None = None,
        on_action: ActionHandler | None = None,
        reconnect_max_delay: float = 2.0,
        poll_interval: float = 1.0,
        shutdown_grace: float = 10.0,
        unreachable_timeout: float = 60.0,
        idempotent_fast_path: bool = False,
        tracer_provider: Any = None,
        meter_provider: Any = None,
    ) -> None:
        if max_concurrency is None:
            max_concurrency = self.default_max_concurrency
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        if not 0 < lease_seconds < math.inf:
            raise ValueError(f"lease_seconds must be positive and finite, got {lease_seconds}")
        if unknown_functions not in ("leave", "fail"):
            raise ValueError(
                f"unknown_functions must be 'leave' or 'fail', got {unknown_functions!r}"
            )
        if not unreachable_timeout > 0:
            raise ValueError(f"unreachable_timeout must be positive, got {unreachable_timeout}")
        if not shutdown_grace >= 0:  # NaN too
            raise ValueError(f"shutdown_grace must be >= 0, got {shutdown_grace}")
        for name, seconds in (
            ("reconnect_max_delay", reconnect_max_delay),
            ("poll_interval", poll_interval),
        ):
            if not 0 < seconds < math.inf:
                raise ValueError(f"{name} must be positive and finite, got {seconds}")
        self.store = open_store(store)
        #: ``close()`` closes the store, unless the runner borrowed it (see
        #: ``AsyncFunctionRunner._sharing``).
        self._closes_store = True
        self.max_concurrency = max_concurrency
        self.reconnect_max_delay = reconnect_max_delay
        #: How often to re-read a Session that waits on calls held by other workers.
        self.poll_interval = poll_interval
        self.shutdown_grace = shutdown_grace
        #: How long a serve that must end keeps trying to reach the server.
        self.unreachable_timeout = unreachable_timeout
        self._registry = FunctionRegistry()
        self._hooks = Hooks(error_formatter, on_error)
        self._on_in_doubt = on_in_doubt
        self._on_action = on_action
        self._observer = CallObserver(
            store_location=str(getattr(self.store, "location", self.store)),
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
        )
        owner = new_owner_id()
        owner_opened(owner)  # until close(): no clock makes this runner's claims look lost
        self._core = RunnerCore(
            self._registry,
            owner=owner,
            lease_seconds=lease_seconds,
            max_concurrency=max_concurrency,
            unknown_functions=unknown_functions,
            poll_interval=poll_interval,
            in_doubt_hook=on_in_doubt is not None,
            action_hook=on_action is not None,
            unreachable_timeout=unreachable_timeout,
            idempotent_fast_path=idempotent_fast_path,
        )

    def _close_store(self) -> None:
        if self._closes_store:
            self.store.close()

    def _now(self) -> float:
        """The runner's clock: ``time.monotonic``. Deadlines and every time the core is
        told come from here, so the simulator runs a runner on virtual time."""
        return time.monotonic()

    def _deadline(self, timeout: float | None) -> float | None:
        """When a serve with ``timeout`` must end (``None`` or ``inf``: never)."""
        if timeout is None or timeout == math.inf:
            return None
        if math.isnan(timeout):
            raise ValueError("timeout must be a number of seconds or None, got nan")
        return self._now() + timeout

    @contextlib.contextmanager
    def _time_left(self, deadline: float | None) -> Iterator[CallOptions]:
        """Per-request options that keep a request of ``run_turn`` within its deadline;
        requests sent inside the block do not wait past it for a retry either."""
        if deadline is None:
            yield {}
            return
        left = max(0.001, deadline - self._now())
        with within(left):
            yield {"timeout": left}

    @overload
    def function(self, func: F, /) -> F: ...

    @overload
    def function(
        self,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: Mapping[str, Any] | type[pydantic.BaseModel] | None = None,
        idempotent: bool = False,
        defer_loading: bool = False,
        strict: bool = True,
        timeout: float | None = None,
        max_concurrency: int | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> Callable[[F], F]: ...

    def function(
        self,
        func: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: Mapping[str, Any] | type[pydantic.BaseModel] | None = None,
        idempotent: bool = False,
        defer_loading: bool = False,
        strict: bool = True,
        timeout: float | None = None,
        max_concurrency: int | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> Any:
        """Register a function the agent may call; use as ``@runner.function`` or
        ``@runner.function(name=..., idempotent=True)``.

        ``idempotent=True`` declares that running the function twice for one call is
        harmless, so a call left in doubt by a crash is run again instead of failed.
        ``strict=False`` drops arguments the function does not name instead of failing
        the call. ``timeout`` (seconds), ``max_concurrency`` and ``max_attempts`` limit
        how long, how many at once and how often the function runs for a call.
        The function is returned unchanged.
        """

        def register(target: Callable[..., Any]) -> Callable[..., Any]:
            self._registry.add(
                describe_function(
                    target,
                    name=name,
                    description=description,
                    parameters=parameters,
                    idempotent=idempotent,
                    defer_loading=defer_loading,
                    strict=strict,
                    timeout=timeout,
                    max_concurrency=max_concurrency,
                    max_attempts=max_attempts,
                )
            )
            return target

        return register(func) if func is not None else register

    @property
    def tools(self) -> list[dict[str, Any]]:
        """Declarations for an Agent's or Session's ``tools``; adds ``tool_search``
        exactly when some function is deferred, as the server requires."""
        return self._registry.tools()


#: What ``run_turn`` sends: a text, or user messages (models or their JSON).
TurnInput = str | Sequence[UserMessage | Mapping[str, Any]]


def input_event(input: TurnInput) -> InputMessageEvent:
    if isinstance(input, str):
        return InputMessageEvent.from_text(input)
    messages = [m if isinstance(m, UserMessage) else UserMessage.model_validate(m) for m in input]
    return InputMessageEvent(input=messages)


def final_text(items: Sequence[object], turn_id: str) -> str | None:
    """The Turn's answer: its last assistant message, preferring ``final_answer``."""
    messages = [
        item
        for item in items
        if isinstance(item, MessageItem) and item.role == "assistant" and item.turn_id == turn_id
    ]
    finals = [m for m in messages if m.phase == "final_answer"] or messages
    return finals[-1].output_text if finals else None


def closed_before_the_end() -> RunnerError:
    """What a serve still running when its runner's ``close()`` gave up raises."""
    return RunnerError(
        "The runner was closed before this serve ended: its calls were still running "
        "after shutdown_grace. A restarted runner settles them."
    )


def turn_result(
    serve: Serve, items: Sequence[object], output_type: type[Any] | None
) -> TurnResult[Any]:
    """The Turn's outcome; with ``output_type``, its answer parsed (or
    :class:`StructuredOutputError`, which keeps the result)."""
    assert serve.target_turn is not None
    result: TurnResult[Any] = TurnResult(
        session_id=serve.session_id,
        turn_id=serve.target_turn,
        status=serve.target_turn_status or "unknown",
        text=final_text(items, serve.target_turn),
        output=None,
        report=serve.report,
    )
    if output_type is None:
        return dataclasses.replace(result, output=result.text)
    return parse_turn_output(result, output_type)
