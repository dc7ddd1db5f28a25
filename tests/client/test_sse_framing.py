"""The SSE framing of event streams, against a plain reading of the WHATWG rules, and
the parsing of an event's data.

The parser reads chunk by chunk and scans each byte once; the reference here reads the
whole input in one go, line by line, as the rules are written. Whatever the chunking,
both must find the same frames: a difference is a line end missed at a chunk boundary
(a CRLF split in two, a line end in the last byte of a chunk) or a field misread.
"""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import strategies as st

from openagentcore._limits import load_json
from openagentcore._streaming import _Frame, _SSEParser

_LINE_END = re.compile(rb"\r\n|\r|\n")

#: Pieces that make frames, line ends of every kind, comments and broken UTF-8.
pieces = st.sampled_from(
    [
        b"data:",
        b"data: ",
        b"data:  x",
        b"event: ping",
        b"event:",
        b"id: 7",
        b"retry: 10",
        b": keepalive",
        b"x",
        b'{"a": 1}',
        b"caf\xc3\xa9",
        b"\xe2\x82",
        b"\xff",
        b":",
        b" ",
        b"\n",
        b"\r",
        b"\r\n",
        b"\n\n",
    ]
)


def reference(stream: bytes) -> tuple[list[_Frame], bool]:
    """Frames of ``stream`` read as a whole; a lone CR at its very end is not yet a
    line end (it may be the first half of a CRLF), and an unterminated line is pending."""
    frames: list[_Frame] = []
    ended = False
    event, data = "", []
    start = 0
    for match in _LINE_END.finditer(stream):
        if match.group() == b"\r" and match.end() == len(stream):
            break
        line = stream[start : match.start()].decode("utf-8", errors="replace")
        start = match.end()
        if not line:
            ended = True
            if data:
                frames.append(_Frame(event or "message", "\n".join(data)))
            event, data = "", []
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data.append(value)
            elif name == "event":
                event = value
    return frames, ended


@given(st.lists(pieces, max_size=40), st.data())
def test_any_chunking_gives_the_frames_of_the_whole(
    parts: list[bytes], data: st.DataObject
) -> None:
    stream = b"".join(parts)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    parser = _SSEParser(max_event_bytes=1 << 20)
    frames: list[_Frame] = []
    ended = False
    for chunk in chunks:
        new, chunk_ended = parser.feed(chunk)
        frames += new
        ended = ended or chunk_ended

    assert (frames, ended) == reference(stream)


# -- event data parsed as text -------------------------------------------------------

json_texts = st.one_of(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=12,
    ).map(lambda value: json.dumps(value, ensure_ascii=False)),
    st.text(max_size=12),
)


@given(json_texts, st.sampled_from(["", "\ufeff", "\x00", " \x00", "[" * 5]), st.integers(1, 6))
def test_event_text_parses_as_its_utf8_bytes_do(text: str, prefix: str, depth: int) -> None:
    """Event data arrives as text; the bytes path (what response bodies take) is the
    reference, byte order marks and UTF-16 guesses included."""
    data = prefix + text

    def outcome(value: str | bytes) -> tuple[str, object]:
        try:
            return "parsed", load_json(value, depth)
        except ValueError as exc:
            return "refused", type(exc)

    assert outcome(data) == outcome(data.encode())
