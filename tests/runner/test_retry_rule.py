"""One rule for which HTTP statuses are worth retrying, shared by the client and the runner.

The runner once posted results again after a 425 that the client's own retries gave up
on at once, and reopened streams after statuses it then refused to post to: three
copies of the rule had drifted. Now ``_retry.is_retryable_status`` is the rule, and this
test fails if any of its users stops following it.
"""

from __future__ import annotations

import httpx
import pytest

from openagentcore._errors import status_error
from openagentcore._retry import RetryPolicy
from openagentcore.runner._core import Refusal, classify_refusal
from openagentcore.runner._pump import reconnectable

URL = "https://api.test/v1/agents/sessions/ses_1/events"
#: Statuses the runner reads more closely than "later or never": 401 and 403 are about
#: the key or the URL (the result stays saved, the serve ends), 409 is told apart by its
#: code (another result, or a Turn that cannot take it).
_READ_CLOSELY = frozenset({401, 403, 409})


@pytest.mark.parametrize("status", [s for s in range(400, 600) if s not in _READ_CLOSELY])
def test_client_and_runner_retry_the_same_statuses(status: int) -> None:
    get = httpx.Request("GET", URL)
    post = httpx.Request("POST", URL, headers={"Idempotency-Key": "oac-1"})
    read_failed = status_error(httpx.Response(status, request=get), None)
    post_failed = status_error(httpx.Response(status, request=post), None)

    client_retries = RetryPolicy().should_retry(read_failed, get)
    runner_posts_again = classify_refusal(post_failed) is Refusal.RETRY_LATER
    runner_reopens_stream = reconnectable(read_failed)

    assert client_retries == runner_posts_again == runner_reopens_stream, status


def test_too_early_is_worth_retrying_everywhere() -> None:
    """425 Too Early says "later": a result refused with it stays saved and is posted
    again, as the client would have sent it again."""
    post = httpx.Request("POST", URL, headers={"Idempotency-Key": "oac-1"})
    too_early = status_error(httpx.Response(425, request=post), None)

    assert RetryPolicy().should_retry(too_early, post)
    assert classify_refusal(too_early) is Refusal.RETRY_LATER
    assert reconnectable(too_early)
