"""Helpers that let one test body drive ``Client`` and ``AsyncClient`` alike."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeAlias

import httpx

from openagentcore import AsyncClient, Client

AnyClient: TypeAlias = "Client | AsyncClient"

#: A recognisable key: any test that finds it in a repr, message or log has found a leak.
API_KEY = "sk-oac-test-3f9c1a7e5b2d4c6e8a0b"
BASE_URL = "https://api.test/v1"
CORPUS = Path(__file__).parent.parent / "corpus"


def corpus(name: str) -> dict[str, Any]:
    """One file of the hand-written wire corpus, as ``{case name: payload}``."""
    data: dict[str, Any] = json.loads((CORPUS / f"{name}.json").read_text())
    return data


async def resolve(value: Any) -> Any:
    """The result of a client call: awaited when the async client returned an awaitable."""
    if inspect.isawaitable(value):
        return await value
    return value


async def collect(iterable: Any) -> list[Any]:
    """Every item of a sync or async iterable (pages, event streams)."""
    if hasattr(iterable, "__aiter__"):
        return [item async for item in iterable]
    return list(iterable)


async def close(closable: Any) -> None:
    await resolve(closable.close())


def sse(frames: Iterable[Mapping[str, Any] | str]) -> bytes:
    """An event-stream body. A mapping is an event named by its ``type``; a string is
    sent verbatim (comments, malformed frames)."""
    parts = []
    for frame in frames:
        if isinstance(frame, str):
            parts.append(frame)
        else:
            parts.append(f"event: {frame['type']}\ndata: {json.dumps(frame)}\n\n")
    return "".join(parts).encode()


def sse_response(frames: Iterable[Mapping[str, Any] | str]) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sse(frames))


def sent_json(request: httpx.Request) -> Any:
    return json.loads(request.content)
