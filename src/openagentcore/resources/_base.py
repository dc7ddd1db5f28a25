"""What every resource shares: path building, request specs and the sync/async plumbing.

Resource methods only describe a call (a :class:`RequestOptions` and a parser); these
bases send it. Keeping the description in one function per call means the sync and
async resources cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

from .._base_client import AsyncTransport, RequestOptions, SyncTransport, dump_json

__all__ = ["AsyncResource", "SyncResource", "body", "dump_json", "path", "post"]
from .._pagination import AsyncPage, AsyncPageRequest, SyncPage

T = TypeVar("T")


def path(template: str, **ids: str) -> str:
    """Fill ``template`` with URL-quoted ids, refusing empty ones before any request."""
    for name, value in ids.items():
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"Expected a non-empty string for `{name}`, got {value!r}")
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

    def _call(self, options: RequestOptions, parse: Callable[[Any], T]) -> T:
        result = self._transport.request(options, parse)
        assert result is not None, "a parsed response body was expected"
        return result

    def _call_no_body(self, options: RequestOptions) -> None:
        self._transport.request(options, None)

    def _list(
        self, route: str, params: Mapping[str, Any], parse: Callable[[Any], T]
    ) -> SyncPage[T]:
        def fetch(after: str | None) -> SyncPage[T]:
            query = {**params, "after": after} if after is not None else dict(params)
            return self._call(
                RequestOptions("GET", route, params=query),
                lambda data: SyncPage(_as_mapping(data), parse, fetch),
            )

        return fetch(params.get("after"))


class AsyncResource:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def _call(self, options: RequestOptions, parse: Callable[[Any], T]) -> T:
        result = await self._transport.request(options, parse)
        assert result is not None, "a parsed response body was expected"
        return result

    async def _call_no_body(self, options: RequestOptions) -> None:
        await self._transport.request(options, None)

    def _list(
        self, route: str, params: Mapping[str, Any], parse: Callable[[Any], T]
    ) -> AsyncPageRequest[T]:
        async def fetch(after: str | None) -> AsyncPage[T]:
            query = {**params, "after": after} if after is not None else dict(params)
            return await self._call(
                RequestOptions("GET", route, params=query),
                lambda data: AsyncPage(_as_mapping(data), parse, fetch),
            )

        return AsyncPageRequest(lambda: fetch(params.get("after")))


def _as_mapping(data: Any) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ValueError("expected a JSON object")
    return data
