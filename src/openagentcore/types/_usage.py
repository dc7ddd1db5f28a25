"""Token accounting shared by Sessions, Turns and terminal Turn events."""

from __future__ import annotations

from ._base import WireModel

__all__ = ["InputTokensDetails", "OutputTokensDetails", "TokenUsage"]


class InputTokensDetails(WireModel):
    """How many of the input tokens came from the cache."""

    cached_tokens: int


class OutputTokensDetails(WireModel):
    """How many of the output tokens were spent on reasoning."""

    reasoning_tokens: int


class TokenUsage(WireModel):
    """A complete usage snapshot the harness reported.

    Where usage is unknown the server sends ``null`` rather than zeros, so a ``None``
    ``usage`` must never be read as "nothing was used". A later read can still fill it in.
    """

    input_tokens: int
    #: ``None`` when the harness reported no breakdown (the contract allows null).
    input_tokens_details: InputTokensDetails | None = None
    output_tokens: int
    output_tokens_details: OutputTokensDetails | None = None
    total_tokens: int
