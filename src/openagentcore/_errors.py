"""The exception tree.

Everything the SDK raises on purpose derives from :class:`OpenAgentCoreError`, so an
application can catch one class. HTTP failures carry the server's error envelope
(``type``, ``code``, ``message``, ``param``) and the request id to quote in a bug report.
No exception ever carries the API key: requests are described by method and URL only,
and the request an exception keeps (``error.request``, ``error.response.request``, and
that of an httpx error it was raised from) is a copy whose credentials are redacted, so
a logged, pickled or reported exception holds no secret.
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIResponseValidationError",
    "APIStatusError",
    "APITimeoutError",
    "AdmissionError",
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "InternalServerError",
    "NotFoundError",
    "OpenAgentCoreError",
    "PermissionDeniedError",
    "RateLimitError",
    "RedirectError",
    "ResponseTooLargeError",
    "ServiceUnavailableError",
    "StreamError",
    "UnprocessableEntityError",
]


class OpenAgentCoreError(Exception):
    """Root of every error this SDK raises on purpose."""


class AdmissionError(OpenAgentCoreError, ValueError):
    """A declaration breaks a rule the server checks at admission; nothing was sent.

    ``tool`` names the offending tool (its function name, MCP ``server_label``, or
    ``tools[i]`` when it has no name) and ``field`` the field (``None`` for rules about
    the whole list), so the message can say exactly what to change.
    """

    def __init__(
        self,
        message: str,
        *,
        tool: str | None = None,
        field: str | None = None,
        code: str = "invalid_request_error",
        server_message: str | None = None,
        server_path: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.tool = tool
        self.field = field
        #: The error code the server answers with for the same input: protocol errors
        #: use ``invalid_request_error``; combinations the Harness cannot run use
        #: ``unsupported_or_invalid_configuration``.
        self.code = code
        self._server_message = server_message
        self._server_path = server_path

    def server_error(self, prefix: str = "") -> tuple[str, str | None]:
        """The ``(message, param)`` the server answers with for the same input.

        Where the contract words the error, that wording (with a null param unless it
        names a path); otherwise this error's own message and field. ``prefix`` is put
        before every path, e.g. ``"agent."`` for an inline Agent on Session create.
        """
        if self._server_message is None:
            return self.message, (prefix + self.field if self.field else None)
        path = None if self._server_path is None else prefix + self._server_path
        return self._server_message.replace(SERVER_PATH, path or ""), path


#: Where the request path goes in an :class:`AdmissionError`'s server message; it is
#: not printable, so no echoed caller value can contain it.
SERVER_PATH = "\x00path\x00"


class APIError(OpenAgentCoreError):
    """A request to the API did not produce the expected result."""

    def __init__(self, message: str, *, request: httpx.Request | None) -> None:
        super().__init__(message)
        self.message = message
        #: The request, without its credentials (see :func:`redacted`).
        self.request = None if request is None else redacted(request)


class APIConnectionError(APIError):
    """The request never got an HTTP answer: DNS, refused connection, reset, protocol error.

    ``request_sent`` is ``False`` only when the failure happened before any byte of the
    request left (the connection could not be opened), so the server cannot have acted
    on it; that is what makes retrying a request without an idempotency key safe.
    """

    def __init__(
        self,
        *,
        request: httpx.Request | None,
        message: str = "Connection error.",
        request_sent: bool = True,
    ) -> None:
        super().__init__(message, request=request)
        self.request_sent = request_sent


class APITimeoutError(APIConnectionError):
    """The request or the stream read timed out."""

    def __init__(self, *, request: httpx.Request | None) -> None:
        super().__init__(request=request, message="Request timed out.")


class APIResponseValidationError(APIError):
    """The server answered 2xx with a body that does not match the expected shape."""

    def __init__(self, message: str, *, response: httpx.Response, body: object) -> None:
        super().__init__(message, request=response.request)
        if self.request is not None:
            response.request = self.request
        self.response = response
        self.status_code = response.status_code
        self.body = body


class ResponseTooLargeError(APIResponseValidationError):
    """A response body or one stream event exceeded the client's size limit.

    The rest of the answer was not read. Raise the limit with
    ``Client(response_limits=ResponseLimits(...))`` if the server is trusted and the
    answer is legitimately that large.
    """


class StreamError(APIError):
    """The event stream sent an ``error`` event, e.g. code ``stream_interrupted``.

    The stream is closed after it. Reconnect, then read the Session to recover: the
    stream never replays what it missed.
    """

    def __init__(
        self, message: str, *, code: str | None, type: str | None, request: httpx.Request | None
    ) -> None:
        super().__init__(message, request=request)
        self.code = code
        self.type = type


class APIStatusError(APIError):
    """The server answered with a 4xx or 5xx status."""

    status_code: int

    def __init__(self, message: str, *, response: httpx.Response, body: object) -> None:
        super().__init__(message, request=response.request)
        if self.request is not None:
            response.request = self.request
        self.response = response
        self.status_code = response.status_code
        self.body = body
        self.request_id: str | None = response.headers.get("x-request-id")
        error = _error_object(body)
        #: Whether the body is the API's error envelope (``{"error": {"type": ...,
        #: "message": ...}}``); ``False`` means something else answered, such as a web
        #: server or proxy in front of the API, or a ``base_url`` naming no API.
        self.from_api: bool = isinstance(error.get("type"), str) and isinstance(
            error.get("message"), str
        )
        self.type: str | None = _str_or_none(error.get("type"))
        self.code: str | None = _str_or_none(error.get("code"))
        self.param: str | None = _str_or_none(error.get("param"))

    def __str__(self) -> str:
        details = ", ".join(
            f"{key}={value!r}"
            for key, value in (("code", self.code), ("param", self.param))
            if value is not None
        )
        suffix = f" ({details})" if details else ""
        rid = f" [request id {self.request_id}]" if self.request_id else ""
        return f"{self.status_code}: {self.message}{suffix}{rid}"


class RedirectError(APIStatusError):
    """3xx: the server answered with a redirect, which the client never follows.

    A redirect is never success: a redirected ``POST`` was not applied. ``location`` is
    the target the server named; if it is right, point ``base_url`` at it.
    """

    @property
    def location(self) -> str | None:
        """The ``Location`` the server named, without any user info in it."""
        return _without_userinfo(_str_or_none(self.response.headers.get("location")))


class BadRequestError(APIStatusError):
    """400: the request is malformed or breaks a rule; the message says which."""

    status_code = 400


class AuthenticationError(APIStatusError):
    """401: the key is missing, unknown or revoked. Check OPENAGENTCORE_API_KEY."""

    status_code = 401


class PermissionDeniedError(APIStatusError):
    """403: the key is valid but may not do this."""

    status_code = 403


class NotFoundError(APIStatusError):
    """404: the resource is missing, malformed or belongs to another Project, or, when
    :attr:`route_missing`, the URL names no API route at all (``base_url`` is wrong)."""

    status_code = 404

    @property
    def route_missing(self) -> bool:
        """Whether the 404 says nothing about the resource: the answer is not the API's
        error envelope, or the API does not know the route (``unsupported_operation``).
        Either way ``base_url`` is the likely culprit, not a deleted resource."""
        return not self.from_api or self.code == "unsupported_operation"


class ConflictError(APIStatusError):
    """409. ``code`` tells a state conflict from a reused ``Idempotency-Key`` with
    different input (``idempotency_conflict``).

    The contract's documents disagree on the code of input a Turn cannot accept:
    ``conflict_error`` (sessions-events.md, execution-tools.md) or ``turn_conflict``
    (error-codes.md). Both are state conflicts here.
    """

    status_code = 409

    @property
    def is_idempotency_conflict(self) -> bool:
        """Whether the key was reused with a different request body (not a state conflict)."""
        return self.code == "idempotency_conflict"

    @property
    def is_state_conflict(self) -> bool:
        """The resource's state refused the request (``conflict_error`` or
        ``turn_conflict``): read the current state before deciding what to send."""
        return self.code in _STATE_CONFLICT_CODES


_STATE_CONFLICT_CODES = ("conflict_error", "turn_conflict")


class UnprocessableEntityError(APIStatusError):
    """422: the request is well formed but cannot be processed."""

    status_code = 422


class RateLimitError(APIStatusError):
    """429: too many requests; retried after ``Retry-After`` when safe."""

    status_code = 429


class InternalServerError(APIStatusError):
    """Any 5xx without a more specific class."""


class ServiceUnavailableError(InternalServerError):
    """503, for example ``execution_unavailable``; retried automatically."""

    status_code = 503


_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: UnprocessableEntityError,
    429: RateLimitError,
    503: ServiceUnavailableError,
}


def status_error(response: httpx.Response, body: object) -> APIStatusError:
    """Build the exception for an error response from its status and envelope."""
    error = _error_object(body)
    message = _str_or_none(error.get("message")) or (
        f"HTTP {response.status_code} from {response.request.method} {response.request.url.path}"
    )
    cls = _BY_STATUS.get(response.status_code)
    if 300 <= response.status_code < 400:
        location = response.headers.get("location")
        message = (
            f"HTTP {response.status_code} redirect from {response.request.method} "
            f"{response.request.url.path} to {_without_userinfo(location)!r}: redirects are "
            "never followed; check base_url"
        )
        cls = RedirectError
    elif cls is None:
        cls = InternalServerError if response.status_code >= 500 else APIStatusError
    return cls(message, response=response, body=body)


#: Failures that happen before a single byte of the request is written.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def _transport_error(exc: httpx.TransportError, request: httpx.Request) -> APIConnectionError:
    """Wrap an httpx failure; the message names the host and port, never a header."""
    sent = not isinstance(exc, _NOT_SENT)
    error: APIConnectionError
    if isinstance(exc, httpx.TimeoutException):
        error = APITimeoutError(request=request)
        error.request_sent = sent
    else:
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        error = APIConnectionError(
            request=request,
            message=f"Connection error: {type(exc).__name__} talking to {url.host}:{port}"
            + (f" ({exc})" if isinstance(exc, httpx.ConnectError) and str(exc) else ""),
            request_sent=sent,
        )
    if error.request is not None:
        exc.request = error.request  # the error it is raised from keeps no key either
    return error


#: Request headers that carry credentials.
_CREDENTIAL_HEADERS = ("authorization", "proxy-authorization")
REDACTED = "[redacted]"


def redacted(request: httpx.Request) -> httpx.Request:
    """A copy of ``request`` to keep in an exception: credential headers replaced by
    ``[redacted]`` and user info dropped from the URL. The request itself is left
    alone, since a retry sends it again."""
    headers = request.headers.copy()
    for name in _CREDENTIAL_HEADERS:
        if name in headers:
            headers[name] = REDACTED
    try:
        content = request.content or None  # no body: no Content-Length added either
    except httpx.RequestNotRead:
        content = None
    return httpx.Request(
        request.method,
        request.url.copy_with(userinfo=b""),
        headers=headers,
        content=content,
        extensions=dict(request.extensions),
    )


def _without_userinfo(location: str | None) -> str | None:
    """A redirect target as safe to show: user info (a password) dropped."""
    if location is None:
        return None
    try:
        return str(httpx.URL(location).copy_with(userinfo=b""))
    except (httpx.InvalidURL, TypeError, ValueError):
        return "<unparseable Location>"


def _error_object(body: object) -> dict[str, Any]:
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            return error
    return {}


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None
