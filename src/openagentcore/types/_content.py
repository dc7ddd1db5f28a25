"""Content parts: the pieces of messages, function results and Subagent instructions."""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import Field, Tag

from ._base import UNKNOWN_TAG, TypedModel, UnknownModel, type_discriminator

__all__ = [
    "Content",
    "EncryptedContent",
    "InputContent",
    "InputImage",
    "InputText",
    "OutputText",
    "SummaryText",
    "UnknownContent",
]


class InputText(TypedModel):
    """Text a caller sends, in a user message or a function result."""

    type: Literal["input_text"] = "input_text"
    text: str


class InputImage(TypedModel):
    """An image a caller sends, as an inline ``data:image/png;base64,...`` URI.

    The server accepts only inline PNG or JPEG data URIs: no remote URL, ``file_id`` or
    ``detail``.
    """

    type: Literal["input_image"] = "input_image"
    image_url: str


class OutputText(TypedModel):
    """Text the agent wrote."""

    type: Literal["output_text"] = "output_text"
    text: str


class EncryptedContent(TypedModel):
    """Opaque content exchanged between agents, readable only by the server."""

    type: Literal["encrypted_content"] = "encrypted_content"
    encrypted_content: str


class SummaryText(TypedModel):
    """One part of a reasoning summary."""

    type: Literal["summary_text"] = "summary_text"
    text: str


class UnknownContent(UnknownModel):
    """A content part of a type this SDK does not know; see :attr:`raw`."""


#: What a caller may send: user message content and function result output.
InputContent: TypeAlias = Annotated[InputText | InputImage, Field(discriminator="type")]

#: Any content part the server returns in an Item or event.
Content: TypeAlias = Annotated[
    Annotated[InputText, Tag("input_text")]
    | Annotated[InputImage, Tag("input_image")]
    | Annotated[OutputText, Tag("output_text")]
    | Annotated[EncryptedContent, Tag("encrypted_content")]
    | Annotated[UnknownContent, Tag(UNKNOWN_TAG)],
    type_discriminator(InputText, InputImage, OutputText, EncryptedContent),
]
