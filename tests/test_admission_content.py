"""Local checks of result and message content, so a runner learns before posting."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from openagentcore._admission import (
    check_image_url,
    check_message_content,
    check_tool_result_content,
)
from openagentcore._errors import AdmissionError

# 19 bytes, so the base64 is padded.
PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x01" * 11).decode()
JPEG = "data:image/jpeg;base64," + base64.b64encode(b"\xff\xd8\xff" + b"\x02" * 9).decode()
GIF = "data:image/gif;base64," + base64.b64encode(b"GIF89a" + b"\x00" * 6).decode()


def image(url: str) -> dict[str, str]:
    return {"type": "input_image", "image_url": url}


def text(value: str) -> dict[str, str]:
    return {"type": "input_text", "text": value}


@pytest.mark.parametrize("url", [PNG, JPEG])
def test_inline_png_and_jpeg_pass(url: str) -> None:
    check_image_url(url)
    check_tool_result_content([text("a"), image(url)], success=True, harness="claude_sdk")


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("https://example.com/a.png", "inline data URIs"),
        (GIF, "PNG and JPEG"),
        (PNG.rstrip("="), "canonical"),
        (PNG.replace("base64,", "base64, "), "canonical"),
        ("data:image/png;base64," + base64.b64encode(b"GIF89a").decode(), "not a PNG"),
        ("data:image/jpeg;base64," + PNG.split(",")[1], "not a JPEG"),
    ],
)
def test_bad_images_name_the_field(url: str, words: str) -> None:
    with pytest.raises(AdmissionError) as caught:
        check_tool_result_content([text("a"), image(url)], success=True)
    assert caught.value.field == "output[1].image_url"
    assert caught.value.code == "invalid_request"
    assert words in caught.value.message


@pytest.mark.parametrize(
    ("output", "error", "field"),
    [
        (12, None, "output"),
        ([{"type": "input_text"}], None, "output[0]"),
        ([{"type": "input_text", "text": "a", "extra": 1}], None, "output[0]"),
        ([{"type": "input_file", "file_id": "f"}], None, "output[0]"),
        ([image(PNG) | {"detail": "high"}], None, "output[0]"),
        ("a\x00b", None, "output"),
        ([text("a\x00")], None, "output[0].text"),
        ("ok", 3, "error"),
        ("ok", "bad\x00", "error"),
    ],
)
def test_malformed_results(output: Any, error: Any, field: str) -> None:
    with pytest.raises(AdmissionError) as caught:
        check_tool_result_content(output, error, success=True)
    assert caught.value.field == field


@pytest.mark.parametrize("output", [None, "", "text", [], [text("a"), image(PNG)]])
def test_well_formed_results_pass(output: Any) -> None:
    check_tool_result_content(output, None, success=True)
    check_tool_result_content(output, "it failed", success=False, harness="codex")


def test_claude_takes_images_only_in_successful_results() -> None:
    check_tool_result_content([image(PNG)], success=False, harness="codex")
    with pytest.raises(AdmissionError) as caught:
        check_tool_result_content([image(PNG)], success=False, harness="claude_sdk")
    assert caught.value.code == "unsupported_or_invalid_configuration"


def test_mcode_takes_no_results_and_unknown_harnesses_are_refused() -> None:
    with pytest.raises(AdmissionError):
        check_tool_result_content("x", success=True, harness="mcode")
    with pytest.raises(AdmissionError) as caught:
        check_tool_result_content("x", success=True, harness="gpt")
    assert caught.value.field == "x_agents_core.harness"


@pytest.mark.parametrize("harness", ["claude_sdk", "mcode"])
@pytest.mark.parametrize("blank", [" ", "\u2028", "\ufeff\u00a0"])
def test_whitespace_only_messages(harness: str, blank: str) -> None:
    check_message_content([text(blank)], harness="codex")
    check_message_content([text(blank), text("x")], harness=harness)
    with pytest.raises(AdmissionError) as caught:
        check_message_content([text(blank)], harness=harness)
    assert caught.value.code == "unsupported_or_invalid_configuration"


def test_python_only_whitespace_is_text() -> None:
    """U+001C is whitespace to Python's str.isspace, but not to the server."""
    check_message_content([text("\x1c")], harness="claude_sdk")


def test_message_images_are_refused_on_mcode() -> None:
    check_message_content([image(PNG)], harness="claude_sdk")
    with pytest.raises(AdmissionError):
        check_message_content([image(PNG)], harness="mcode")
