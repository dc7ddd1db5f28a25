"""RetryPolicy on its own: hint parsing, wait bounds, and what it agrees to replay."""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import httpx
import pytest
import tenacity
from hypothesis import given
from hypothesis import strategies as st

from openagentcore._errors import APIConnectionError, APIError, APITimeoutError, status_error
from openagentcore._retry import Attempts, RetryPolicy, _is_replayable, retry_after_seconds

URL = "https://api.test/v1/agents/sessions"
waits = st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False)


def failed(status: int, **headers: str) -> Exception:
    request = httpx.Request("GET", URL)
    return status_error(httpx.Response(status, headers=headers, request=request), None)


@given(waits)
def test_retry_after_delta_seconds_round_trips(seconds: float) -> None:
    assert retry_after_seconds(httpx.Headers({"Retry-After": str(seconds)})) == seconds


@given(st.integers(min_value=0, max_value=10**9))
def test_retry_after_integer_seconds(seconds: int) -> None:
    assert retry_after_seconds(httpx.Headers({"Retry-After": str(seconds)})) == seconds


@given(waits)
def test_retry_after_ms_is_in_milliseconds(millis: float) -> None:
    assert retry_after_seconds(httpx.Headers({"retry-after-ms": str(millis)})) == millis / 1000


@given(waits, waits)
def test_retry_after_ms_wins_over_retry_after(millis: float, seconds: float) -> None:
    headers = httpx.Headers({"retry-after-ms": str(millis), "retry-after": str(seconds)})

    assert retry_after_seconds(headers) == millis / 1000


@given(st.sampled_from(["soon", "-5", "nan", ""]), waits)
def test_unusable_retry_after_ms_falls_back_to_retry_after(bad: str, seconds: float) -> None:
    headers = httpx.Headers({"retry-after-ms": bad, "retry-after": str(seconds)})

    assert retry_after_seconds(headers) == seconds


@given(st.floats(max_value=-1e-9, allow_nan=False))
def test_negative_hints_are_ignored(value: float) -> None:
    assert retry_after_seconds(httpx.Headers({"retry-after": str(value)})) is None
    assert retry_after_seconds(httpx.Headers({"retry-after-ms": str(value)})) is None


@given(st.integers(min_value=-(10**7), max_value=10**7))
def test_retry_after_http_date_is_the_time_until_then(offset: int) -> None:
    when = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=offset)
    header = email.utils.format_datetime(when, usegmt=True)

    wait = retry_after_seconds(httpx.Headers({"Retry-After": header}))

    assert wait is not None
    assert wait >= 0
    assert wait == pytest.approx(max(0.0, when.timestamp() - time.time()), abs=1.0)


@pytest.fixture
def local_time_not_gmt(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("local_time_not_gmt")
def test_retry_after_date_without_a_zone_is_read_as_gmt() -> None:
    header = email.utils.formatdate(time.time() + 3600)
    assert header.endswith(" -0000"), "RFC 5322 for 'zone unknown'"

    wait = retry_after_seconds(httpx.Headers({"Retry-After": header}))

    assert wait == pytest.approx(3600, abs=2)


@given(
    st.dictionaries(
        st.sampled_from(["retry-after", "retry-after-ms"]),
        st.text(st.characters(min_codepoint=32, max_codepoint=126)),
    )
)
def test_any_header_text_gives_none_or_a_non_negative_wait(headers: dict[str, str]) -> None:
    wait = retry_after_seconds(headers)

    assert wait is None or wait >= 0


def test_absent_hints_give_none() -> None:
    assert retry_after_seconds(httpx.Headers()) is None


@given(
    attempt=st.integers(min_value=1, max_value=10_000),
    initial=st.floats(min_value=0.001, max_value=10),
    ceiling=st.floats(min_value=0, max_value=120),
)
def test_backoff_is_within_its_exponential_ceiling(
    attempt: int, initial: float, ceiling: float
) -> None:
    policy = RetryPolicy(max_retries=attempt, initial_delay=initial, max_delay=ceiling)
    bound = ceiling if attempt > 64 else min(ceiling, initial * 2 ** (attempt - 1))

    wait = policy.delay(APIConnectionError(request=None), attempt)

    assert 0 <= wait <= bound


@given(hint=waits, cap=st.floats(min_value=0, max_value=600), attempt=st.integers(1, 50))
def test_server_hint_replaces_backoff_up_to_the_cap(hint: float, cap: float, attempt: int) -> None:
    policy = RetryPolicy(max_retry_after=cap)

    wait = policy.delay(failed(429, **{"Retry-After": str(hint)}), attempt)

    assert wait == min(hint, cap)


def test_infinite_hint_is_capped() -> None:
    wait = RetryPolicy().delay(failed(503, **{"retry-after-ms": "inf"}), 1)

    assert wait == 60.0
    assert math.isfinite(wait)


@pytest.mark.parametrize(
    ("method", "headers", "error", "retried"),
    [
        ("GET", {}, failed(503), True),
        ("DELETE", {}, failed(500), True),
        ("GET", {}, APITimeoutError(request=None), True),
        ("POST", {"Idempotency-Key": "k"}, failed(429), True),
        ("POST", {"Idempotency-Key": "k"}, APIConnectionError(request=None), True),
        ("POST", {}, failed(503), False),
        ("POST", {}, APIConnectionError(request=None), False),
        ("GET", {}, failed(409), False),
        ("GET", {}, failed(404), False),
        ("POST", {"Idempotency-Key": "k"}, failed(409), False),
        ("GET", {}, ValueError("a bug, not a network failure"), False),
    ],
)
def test_should_retry(
    method: str, headers: dict[str, str], error: Exception, retried: bool
) -> None:
    request = httpx.Request(method, URL, headers=headers)

    assert RetryPolicy().should_retry(error, request) is retried


def _waits_with_tenacity(
    policy: RetryPolicy, request: httpx.Request, errors: list[Exception]
) -> tuple[list[float], BaseException]:
    """Waits tenacity takes, with ``tenacity_kwargs``, before raising; and what it raised."""
    waits: list[float] = []
    failures = iter(errors)
    retrying = tenacity.Retrying(sleep=waits.append, **policy.tenacity_kwargs(request))
    try:
        for attempt in retrying:
            with attempt:
                raise next(failures)
    except APIError as given_up:
        return waits, given_up
    raise AssertionError("tenacity never gave up")


def _waits_with_attempts(
    policy: RetryPolicy, request: httpx.Request, errors: list[Exception]
) -> tuple[list[float], BaseException]:
    """The same, with the transports' :class:`Attempts`."""
    waits: list[float] = []
    attempts = Attempts(policy, request, replayable=_is_replayable(request))
    for error in errors:
        assert isinstance(error, APIError)
        try:
            waits.append(attempts.wait_after(error))
        except APIError as given_up:
            return waits, given_up
    raise AssertionError("Attempts never gave up")


@pytest.mark.parametrize(
    ("method", "statuses", "max_retries"),
    [
        ("GET", [503, 502, 500, 503], 2),
        ("GET", [503, 404], 5),
        ("GET", [429], 0),
        ("POST", [503, 503], 3),
        ("POST", [429, 429, 409], 4),
    ],
)
def test_attempts_decide_as_tenacity_kwargs_do(
    method: str, statuses: list[int], max_retries: int
) -> None:
    """The transports retry with :class:`Attempts`; ``tenacity_kwargs`` remains for
    callers who retry with tenacity: both apply one policy the same way."""
    request = httpx.Request(method, URL)
    policy = RetryPolicy(max_retries=max_retries)
    errors = [failed(status, **{"retry-after": str(n + 1)}) for n, status in enumerate(statuses)]

    assert _waits_with_tenacity(policy, request, errors) == _waits_with_attempts(
        policy, request, errors
    )
