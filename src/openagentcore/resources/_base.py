"""What every resource shares: path building, request specs and the sync/async plumbing.

Resource methods only describe a call (a :class:`RequestOptions` and a parser); these
bases send it. Keeping the description in one function per call means the sync and
async resources cannot drift apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from typing_extensions import TypedDict

from .._base_client import AsyncTransport, RequestOptions, SyncTransport, dump_json
from .._pagination import AsyncPage, AsyncPageRequest, SyncPage, check_page

__all__ = [
    "CallOptions",
    "AsyncResource",
    "SyncResource",
    "body",
    "dump_json",
    "path",
    "post",
    "split_call_options",
]

T = TypeVar("T")


class CallOptions(TypedDict, total=False):
    """Options every resource method takes for one call, as in openai-python.

    ``timeout`` and ``max_retries`` replace the client's for this call;
    ``extra_headers``, ``extra_query`` and ``extra_body`` are merged over what the
    method sends (for fields this SDK does not know yet).
    """

    timeout: float | httpx.Timeout | None
    max_retries: int
    extra_headers: Mapping[str, str] | None
    extra_query: Mapping[str, Any] | None
    extra_body: Mapping[str, Any] | None


_CALL_OPTIONS = frozenset(CallOptions.__annotations__)


def split_call_options(params: Mapping[str, Any]) -> tuple[dict[str, Any], CallOptions]:
    """Separate a method's ``**kwargs`` into API fields and :class:`CallOptions`."""
    fields = {key: value for key, value in params.items() if key not in _CALL_OPTIONS}
    options: Any = {key: value for key, value in params.items() if key in _CALL_OPTIONS}
    return fields, options


def with_call_options(options: RequestOptions, call: CallOptions) -> RequestOptions:
    return dataclasses.replace(options, **call) if call else options


def path(template: str, **ids: str) -> str:
    """Fill ``template`` with percent-encoded ids, refusing before any request an id
    that is empty or that a URL would not keep as one opaque segment (``.``, ``..``
    or anything with ``/``: they would be normalised into another route)."""
    for name, value in ids.items():
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"Expected a non-empty string for `{name}`, got {value!r}")
        if value in (".", "..") or "/" in value:
            raise ValueError(
                f"`{name}` cannot be {value!r}: ids are single path segments, so `.`, "
                "`..` and anything containing `/` would reach a different route"
            )
    return template.format(**{name: quote(value, safe="") for name, value in ids.items()})


def body(params: Mapping[str, Any]) -> dict[str, Any]:
    """JSON body from keyword params: models dumped keeping field presence."""
    dumped = dump_json(dict(params))
    assert isinstance(dumped, dict)
    return dumped


def post(route: str, params: Mapping[str, Any], **options: Any) -> RequestOptions:
    return RequestOptions("POST", route, body=body(params), has_body=True, **options)


class SyncResource:
    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    def _call(self, options: RequestOptions, parse: Callable[[Any], T], call: CallOptions) -> T:
        result = self._transport.request(with_call_options(options, call), parse)
        assert result is not None, "a parsed response body was expected"
        return result

    def _call_no_body(self, options: RequestOptions, call: CallOptions) -> None:
        self._transport.request(with_call_options(options, call), None)

    def _send(self, options: RequestOptions, call: CallOptions) -> httpx.Response:
        return self._transport.send(with_call_options(options, call))

    def _list(
        self,
        route: str,
        params: Mapping[str, Any],
        parse: Callable[[Any], T],
        call: CallOptions,
    ) -> SyncPage[T]:
        def fetch(after: str | None, seen: frozenset[str]) -> SyncPage[T]:
            query = {**params, "after": after} if after is not None else dict(params)

            def page(data: Any) -> SyncPage[T]:
                new = SyncPage(_as_mapping(data), parse, lambda last: fetch(last, seen | {last}))
                check_page(new, seen)
                return new

            return self._call(RequestOptions("GET", route, params=query), page, call)

        first = params.get("after")
        return fetch(first, frozenset({first} if first else ()))


class AsyncResource:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def _call(
        self, options: RequestOptions, parse: Callable[[Any], T], call: CallOptions
    ) -> T:
        result = await self._transport.request(with_call_options(options, call), parse)
        assert result is not None, "a parsed response body was expected"
        return result

    async def _call_no_body(self, options: RequestOptions, call: CallOptions) -> None:
        await self._transport.request(with_call_options(options, call), None)

    async def _send(self, options: RequestOptions, call: CallOptions) -> httpx.Response:
        return await self._transport.send(with_call_options(options, call))

    def _list(
        self,
        route: str,
        params: Mapping[str, Any],
        parse: Callable[[Any], T],
        call: CallOptions,
    ) -> AsyncPageRequest[T]:
        async def fetch(after: str | None, seen: frozenset[str]) -> AsyncPage[T]:
            query = {**params, "after": after} if after is not None else dict(params)

            def page(data: Any) -> AsyncPage[T]:
                new = AsyncPage(_as_mapping(data), parse, lambda last: fetch(last, seen | {last}))
                check_page(new, seen)
                return new

            return await self._call(RequestOptions("GET", route, params=query), page, call)

        first = params.get("after")
        return AsyncPageRequest(lambda: fetch(first, frozenset({first} if first else ())))


def _as_mapping(data: Any) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ValueError("expected a JSON object")
    return data
