"""Error responses map to the exception tree with the server's envelope attached."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import respx

from openagentcore._errors import (
    APIResponseValidationError,
    APIStatusError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    InternalServerError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    ServiceUnavailableError,
    UnprocessableEntityError,
)

from ._support import AnyClient, corpus, resolve

pytestmark = pytest.mark.anyio


def envelope(type_: str, code: str | None, message: str, param: str | None = None) -> Any:
    return {"error": {"type": type_, "code": code, "message": message, "param": param}}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, BadRequestError),
        (401, AuthenticationError),
        (403, PermissionDeniedError),
        (404, NotFoundError),
        (409, ConflictError),
        (422, UnprocessableEntityError),
        (429, RateLimitError),
        (500, InternalServerError),
        (502, InternalServerError),
        (503, ServiceUnavailableError),
        (418, APIStatusError),
    ],
)
async def test_status_maps_to_its_class_with_the_envelope(
    no_retry_client: AnyClient, api: respx.MockRouter, status: int, expected: type[Exception]
) -> None:
    body = envelope("invalid_request_error", "bad_value", "limit is too large", "limit")
    api.get("agents/sessions/se_1").respond(status, json=body, headers={"x-request-id": "req_9"})

    with pytest.raises(APIStatusError) as caught:
        await resolve(no_retry_client.sessions.retrieve("se_1"))

    error = caught.value
    assert type(error) is expected
    assert error.status_code == status
    assert error.type == "invalid_request_error"
    assert error.code == "bad_value"
    assert error.param == "limit"
    assert error.message == "limit is too large"
    assert error.request_id == "req_9"
    assert error.body == body
    assert error.response.status_code == status
    assert error.request is not None
    assert error.request.url.path == "/v1/agents/sessions/se_1"
    assert (
        str(error)
        == f"{status}: limit is too large (code='bad_value', param='limit') [request id req_9]"
    )


@pytest.mark.parametrize(
    ("code", "is_idempotency_conflict"),
    [("conflict_error", False), ("idempotency_conflict", True)],
)
async def test_conflict_tells_state_conflicts_from_reused_keys(
    client: AnyClient, api: respx.MockRouter, code: str, is_idempotency_conflict: bool
) -> None:
    route = api.post("agents/sessions/se_1/events").respond(
        409, json=envelope("invalid_request_error", code, "no")
    )

    with pytest.raises(ConflictError) as caught:
        await resolve(
            client.sessions.events.create("se_1", events=[{"type": "agent.session.input.cancel"}])
        )

    assert caught.value.code == code
    assert caught.value.is_idempotency_conflict is is_idempotency_conflict
    assert route.call_count == 1


@pytest.mark.parametrize(
    ("answer", "body"),
    [
        (httpx.Response(502, text="<html>Bad Gateway</html>"), "<html>Bad Gateway</html>"),
        (httpx.Response(500), ""),
        (httpx.Response(400, json={"detail": "nope"}), {"detail": "nope"}),
        (httpx.Response(400, json={"error": "flat string"}), {"error": "flat string"}),
        (httpx.Response(400, json=["not", "an", "object"]), ["not", "an", "object"]),
    ],
    ids=["html", "empty", "no envelope", "envelope not an object", "array"],
)
async def test_error_without_an_envelope_still_says_what_failed(
    no_retry_client: AnyClient, api: respx.MockRouter, answer: httpx.Response, body: object
) -> None:
    api.get("agents/ag_1").mock(return_value=answer)

    with pytest.raises(APIStatusError) as caught:
        await resolve(no_retry_client.agents.retrieve("ag_1"))

    error = caught.value
    assert error.status_code == answer.status_code
    assert error.body == body
    assert (error.type, error.code, error.param, error.request_id) == (None, None, None, None)
    assert error.message == f"HTTP {answer.status_code} from GET /v1/agents/ag_1"


async def test_malformed_success_body_names_the_field(
    client: AnyClient, api: respx.MockRouter
) -> None:
    session = dict(corpus("sessions")["idle_new"])
    del session["status"]
    route = api.get("agents/sessions/se_1").respond(200, json=session)

    with pytest.raises(
        APIResponseValidationError, match=r"GET /v1/agents/sessions/se_1: status"
    ) as caught:
        await resolve(client.sessions.retrieve("se_1"))

    assert caught.value.body == session
    assert caught.value.status_code == 200
    assert route.call_count == 1, "a bad body is not retried"


async def test_nested_malformed_field_is_named_by_its_path(
    client: AnyClient, api: respx.MockRouter
) -> None:
    session = corpus("sessions")["idle_new"]
    bad = {**session, "agent": {**session["agent"], "tools": "not a list"}}
    api.get("agents/sessions/se_1").respond(200, json=bad)

    with pytest.raises(APIResponseValidationError, match=r"agent\.tools"):
        await resolve(client.sessions.retrieve("se_1"))


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(200, text="<html>login</html>", headers={"content-type": "text/html"}),
        httpx.Response(200),
    ],
    ids=["html", "empty"],
)
async def test_success_without_json_is_a_validation_error(
    client: AnyClient, api: respx.MockRouter, answer: httpx.Response
) -> None:
    api.get("agents/ag_1").mock(return_value=answer)

    with pytest.raises(APIResponseValidationError, match=r"GET /v1/agents/ag_1"):
        await resolve(client.agents.retrieve("ag_1"))


@pytest.mark.parametrize(
    "payload",
    [{"object": "list"}, {"object": "list", "data": {"id": "x"}}, ["a list"]],
    ids=["no data", "data not an array", "not an object"],
)
async def test_malformed_list_page_is_a_validation_error(
    client: AnyClient, api: respx.MockRouter, payload: object
) -> None:
    api.get("agents").respond(200, json=payload)

    with pytest.raises(APIResponseValidationError, match="GET /v1/agents"):
        await resolve(client.agents.list())
