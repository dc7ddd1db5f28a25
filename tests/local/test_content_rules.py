"""Item 2: message and function-result content is validated before it is stored, so
refused content never consumes a pending call (message-content.md, execution-tools.md)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from ._support import FUNCTION_TOOLS, Api, result_event

# 34 bytes: the base64 ends in "==", so its last character has unused low bits.
PNG_BYTES = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(18))
JPEG_BYTES = b"\xff\xd8\xff\xe0" + bytes(range(20))
GIF_BYTES = b"GIF89a" + bytes(range(20))


def data_uri(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


PNG = data_uri("image/png", PNG_BYTES)
JPEG = data_uri("image/jpeg", JPEG_BYTES)
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _with_stray_bits(uri: str) -> str:
    """The same bytes, but with nonzero unused bits in the last base64 character."""
    head, last = uri[:-3], uri[-3]
    return head + _ALPHABET[_ALPHABET.index(last) | 1] + "=="


BAD_IMAGES = {
    "remote-url": "https://example.com/cat.png",
    "not-a-url": "cat.png",
    "file-id": "file-abc123",
    "unpadded-base64": PNG.rstrip("="),
    "base64-with-line-break": PNG[:40] + "\n" + PNG[40:],
    "stray-bits": _with_stray_bits(PNG),
    "gif": data_uri("image/gif", GIF_BYTES),
    "gif-declared-png": data_uri("image/png", GIF_BYTES),
    "jpeg-declared-png": data_uri("image/png", JPEG_BYTES),
    "empty-payload": "data:image/png;base64,",
    "not-base64-encoded": "data:image/png," + "x" * 10,
}


def _image(url: str) -> dict[str, str]:
    return {"type": "input_image", "image_url": url}


def _waiting(api: Api, **agent: Any) -> tuple[str, dict[str, Any]]:
    body = {"agent": {"tools": FUNCTION_TOOLS[:1], **agent}}
    session = api.create_session(**body)
    action = api.wait_status(session["id"], "requires_action")["required_actions"][0]
    return session["id"], action


def test_fixtures_are_what_they_claim() -> None:
    assert PNG.endswith("==")
    stray = BAD_IMAGES["stray-bits"]
    assert stray != PNG
    assert base64.b64decode(stray.split(",", 1)[1]) == PNG_BYTES


@pytest.mark.parametrize("url", BAD_IMAGES.values(), ids=BAD_IMAGES.keys())
def test_a_result_with_an_invalid_image_is_refused_and_keeps_the_call(api: Api, url: str) -> None:
    """execution-tools.md, "Functions": invalid or unsupported content cannot consume a
    pending call; message-content.md, "Images": inline PNG/JPEG data URIs with
    canonical base64 that match the declared type, and no remote URL or file ID."""
    session_id, action = _waiting(api)
    bad = {
        **result_event(action, "x"),
        "output": [{"type": "input_text", "text": "see"}, _image(url)],
    }

    response = api.post_events(session_id, [bad])

    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "events[0].output[1].image_url"
    session = api.session(session_id)
    assert session["status"] == "requires_action"
    assert [a["call_id"] for a in session["required_actions"]] == [action["call_id"]]
    good = {**result_event(action, "x"), "output": [_image(PNG), _image(JPEG)]}
    assert api.post_events(session_id, [good]).status_code == 202
    api.wait_status(session_id, "idle")
    outputs = [item for item in api.items(session_id) if item["type"] == "function_call_output"]
    assert [item["output"] for item in outputs] == [[_image(PNG), _image(JPEG)]]


@pytest.mark.parametrize("url", BAD_IMAGES.values(), ids=BAD_IMAGES.keys())
def test_a_message_with_an_invalid_image_is_refused(api: Api, url: str) -> None:
    """message-content.md, "Images": the same image rules hold for messages."""
    response = api.http.post(
        "/agents/sessions",
        json={
            "environment": {"type": "none"},
            "input": [{"role": "user", "content": [_image(url)]}],
        },
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "input[0].content[0].image_url"


def test_a_failed_result_with_an_image_is_refused_on_claude(api: Api) -> None:
    """message-content.md, "Function results": Claude Code takes images only in
    successful results; a refused result leaves the pending call open."""
    session_id, action = _waiting(api, x_agents_core={"harness": "claude_sdk"})
    failed = {**result_event(action, "x"), "success": False, "output": [_image(PNG)]}

    response = api.post_events(session_id, [failed])

    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "unsupported_or_invalid_configuration"
    assert api.session(session_id)["status"] == "requires_action"
    ok = {**result_event(action, "x"), "success": False, "output": None, "error": "boom"}
    assert api.post_events(session_id, [ok]).status_code == 202


@pytest.mark.parametrize("text", ["   ", "\n\t", "\u0085", "\ufeff", "\u3000 "])
@pytest.mark.parametrize("harness", ["claude_sdk", "mcode"])
def test_whitespace_only_text_is_refused_where_the_harness_cannot_run_it(
    api: Api, harness: str, text: str
) -> None:
    """message-content.md, "Whitespace-only text": Claude Code and MiniMax Code answer
    400 unsupported_or_invalid_configuration, with Go's and ECMAScript's whitespace."""
    response = api.http.post(
        "/agents/sessions",
        json={
            "environment": {"type": "none"},
            "input": text,
            "agent": {"x_agents_core": {"harness": harness}},
        },
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "unsupported_or_invalid_configuration"


@pytest.mark.parametrize("text", ["   ", "\u001c"])
def test_whitespace_only_text_runs_on_codex(api: Api, text: str) -> None:
    session = api.create_session(input=text, agent={"x_agents_core": {"harness": "codex"}})
    api.wait_status(session["id"], "idle")


def test_whitespace_only_steering_is_refused_on_claude(api: Api) -> None:
    session_id, _ = _waiting(api, x_agents_core={"harness": "claude_sdk"})
    message = {
        "type": "agent.session.input.message",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "  "}]}],
    }
    response = api.post_events(session_id, [message])
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "events[0].input[0].content"


def test_message_images_are_refused_on_mcode(api: Api) -> None:
    """message-content.md, "Images": MiniMax Code takes no message images."""
    response = api.http.post(
        "/agents/sessions",
        json={
            "environment": {"type": "none"},
            "input": [{"role": "user", "content": [_image(PNG)]}],
            "agent": {"x_agents_core": {"harness": "mcode"}},
        },
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "unsupported_or_invalid_configuration"
    assert api.http.get("/agents/sessions", params={"limit": 100}).status_code == 200


def test_a_saved_harness_is_kept_by_an_inline_extension_without_one(api: Api) -> None:
    """wire-semantics.md, "Configuration snapshot": an inline x_agents_core that omits
    harness keeps the saved harness."""
    saved = api.http.post(
        "/agents", json={"model": "m", "x_agents_core": {"harness": "claude_sdk"}}
    ).json()
    response = api.http.post(
        "/agents/sessions",
        json={
            "environment": {"type": "none"},
            "input": " ",
            "agent_id": saved["id"],
            "agent": {"x_agents_core": {}},
        },
    )
    assert response.status_code == 400, response.text
