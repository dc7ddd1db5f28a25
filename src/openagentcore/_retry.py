"""When and how long to wait before retrying a request.

The policy is pure decision (no I/O): the sync and async transports share it through
:class:`Attempts`, which their retry loops consult only once an attempt has failed, so
a request that succeeds first time pays for no retry machinery. ``tenacity_kwargs``
applies the same policy with tenacity, for callers who retry their own work.

Retried: connection errors and timeouts, 408, 425, 429 and every 5xx (503
``execution_unavailable`` included). Never retried: redirects, 409 and every other 4xx.
:func:`is_retryable_status` is the one rule: the runner uses it too, to tell a result
worth posting again or a stream worth reopening from one the server refused.

A POST is replayable only on the routes whose ``Idempotency-Key`` the contract honours
(Session creation and event submission). Any other POST is retried only when the
server cannot have admitted it: the connection failed before the request was sent, or
the answer is one the contract documents as given before any work (429, and 503
``authentication_unavailable`` or ``sandbox_reset_in_progress``).
"""

from __future__ import annotations

import datetime
import email.utils
import logging
import random
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpx
import tenacity

from ._errors import APIConnectionError, APIError, APIStatusError

__all__ = [
    "RETRYABLE_STATUSES",
    "Attempts",
    "RetryPolicy",
    "is_retryable_status",
    "retry_after_seconds",
    "within",
]

logger = logging.getLogger("openagentcore")

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "DELETE"})
#: The 4xx statuses that say "later", not "never": a timeout (408), too early (425,
#: a request the server will take once the connection is established) and too many
#: requests (429). Every 5xx says so too.
RETRYABLE_STATUSES = frozenset({408, 425, 429})
#: 503 codes that error-codes.md documents as written before anything is admitted.
_REFUSED_BEFORE_ADMISSION = frozenset({"authentication_unavailable", "sandbox_reset_in_progress"})
#: Past this many doublings every sensible ``max_delay`` is reached; stopping there keeps
#: ``2.0 ** n`` from overflowing when ``max_retries`` is very large.
_MAX_DOUBLINGS = 64


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many times to retry and how long to wait in between.

    ``max_retries`` counts retries, not attempts: 2 means at most 3 requests. Without a
    server hint the wait grows exponentially from ``initial_delay`` up to ``max_delay``
    with full jitter; a ``Retry-After`` or ``retry-after-ms`` hint is honoured up to
    ``max_retry_after``.
    """

    max_retries: int = 2
    initial_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")

    def should_retry(
        self, error: BaseException, request: httpx.Request, *, replayable: bool | None = None
    ) -> bool:
        """Whether ``error``, raised for ``request``, is worth another attempt.

        ``replayable`` says whether the server would recognise a repeat of ``request``;
        by default, a safe method or a request carrying an ``Idempotency-Key``.
        """
        if replayable is None:
            replayable = _is_replayable(request)
        if isinstance(error, APIConnectionError):
            return replayable or not error.request_sent
        if isinstance(error, APIStatusError):
            if not is_retryable_status(error.status_code):
                return False
            return replayable or _refused_before_admission(error)
        return False

    def delay(self, error: BaseException | None, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if isinstance(error, APIStatusError):
            hinted = retry_after_seconds(error.response.headers)
            if hinted is not None:
                return min(hinted, self.max_retry_after)
        doublings = min(attempt - 1, _MAX_DOUBLINGS)
        ceiling = min(self.max_delay, self.initial_delay * 2.0**doublings)
        return random.uniform(0, ceiling)

    def tenacity_kwargs(
        self, request: httpx.Request, *, replayable: bool | None = None
    ) -> dict[str, Any]:
        """Arguments for ``tenacity.Retrying``/``AsyncRetrying`` that apply this policy."""

        def retry(state: tenacity.RetryCallState) -> bool:
            outcome = state.outcome
            if outcome is None or not outcome.failed:
                return False
            error = outcome.exception()
            return error is not None and self.should_retry(error, request, replayable=replayable)

        def wait(state: tenacity.RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome is not None else None
            return self.delay(error, state.attempt_number)

        def log_retry(state: tenacity.RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            wait_s = state.next_action.sleep if state.next_action is not None else 0.0
            logger.info(
                "Retrying %s %s in %.2fs after %s",
                request.method,
                request.url.path,
                wait_s,
                _describe(error),
            )

        return {
            "retry": retry,
            "wait": wait,
            "before_sleep": log_retry,
            "stop": tenacity.stop_after_attempt(self.max_retries + 1),
            "reraise": True,
        }


#: The end (``time.monotonic()``) of the current caller's whole request, retries
#: included; ``None``: only each attempt's timeout bounds it.
_overall_deadline: ContextVar[float | None] = ContextVar(
    "openagentcore_overall_deadline", default=None
)


@contextmanager
def within(seconds: float | None) -> Iterator[None]:
    """Requests sent in this block (by this thread or task) end within ``seconds``:
    a retry whose wait would pass that raises the error at once instead. (Each
    attempt's own ``timeout`` is the caller's to set.)"""
    if seconds is None:
        yield
        return
    token = _overall_deadline.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _overall_deadline.reset(token)


class Attempts:
    """The retry decisions of one logical call, made the way ``tenacity_kwargs`` makes
    them: retry when the policy says so, wait as it says, and log each retry."""

    __slots__ = ("_deadline", "_number", "_policy", "_replayable", "_request")

    def __init__(self, policy: RetryPolicy, request: httpx.Request, *, replayable: bool) -> None:
        self._policy = policy
        self._request = request
        self._replayable = replayable
        self._number = 1
        self._deadline = _overall_deadline.get()

    def wait_after(self, error: APIError) -> float:
        """Seconds to wait before the next attempt, now that this one raised ``error``;
        re-raises ``error`` when it is not worth retrying or no attempt is left."""
        policy = self._policy
        if (
            not policy.should_retry(error, self._request, replayable=self._replayable)
            or self._number > policy.max_retries
        ):
            raise error
        wait = policy.delay(error, self._number)
        if self._deadline is not None and time.monotonic() + wait >= self._deadline:
            raise error  # no time left to wait for another attempt
        logger.info(
            "Retrying %s %s in %.2fs after %s",
            self._request.method,
            self._request.url.path,
            wait,
            _describe(error),
        )
        self._number += 1
        return wait


def _describe(error: BaseException | None) -> str:
    if isinstance(error, APIStatusError):
        return f"HTTP {error.status_code}" + (f" ({error.code})" if error.code else "")
    return type(error).__name__


def is_retryable_status(status: int) -> bool:
    """Whether a request answered with ``status`` is worth sending again: the client's
    retries, the runner's POSTs of results and its stream reconnects all ask this."""
    return status in RETRYABLE_STATUSES or status >= 500


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The server's requested wait, from ``retry-after-ms`` or ``Retry-After``.

    ``Retry-After`` may be delta-seconds or an HTTP date. Unparseable or negative values
    are ignored rather than trusted.
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000
        except ValueError:
            value = -1
        if value >= 0:
            return value
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            # "-0000" parses to a naive datetime, which .timestamp() would read as local
            # time; HTTP dates are always GMT.
            when = when.replace(tzinfo=datetime.timezone.utc)
        return max(0.0, when.timestamp() - time.time())
    return seconds if seconds >= 0 else None


def _refused_before_admission(error: APIStatusError) -> bool:
    # 429: a rate limiter refuses a request instead of doing its work (RFC 6585).
    return error.status_code == 429 or (
        error.status_code == 503 and error.code in _REFUSED_BEFORE_ADMISSION
    )


def _is_replayable(request: httpx.Request) -> bool:
    return request.method in _SAFE_METHODS or "idempotency-key" in request.headers
