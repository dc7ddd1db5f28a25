"""Where the contract's documents disagree, the SDK accepts both answers.

error-codes.md gives 409 ``turn_conflict`` for input a Turn cannot accept, while
sessions-events.md ("Input errors") and execution-tools.md ("Functions") give
``conflict_error``; openapi.yaml lets a busy Session's DELETE cancel its work and
answer 200, while wire-semantics.md ("Delete") answers 409. A server on loopback
answers each way.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from openagentcore import Client, ConflictError


class _Answers(BaseHTTPRequestHandler):
    status = 200
    body: object = {}

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        payload = json.dumps(type(self).body).encode()
        self.send_response(type(self).status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_POST = do_DELETE = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[ThreadingHTTPServer, type[_Answers]]]:
    handler = type("Handler", (_Answers,), {})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, handler
    httpd.shutdown()
    httpd.server_close()


def _client(httpd: ThreadingHTTPServer) -> Client:
    return Client(
        base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", api_key="k", max_retries=0
    )


@pytest.mark.parametrize("code", ["conflict_error", "turn_conflict"])
def test_both_codes_of_a_turn_conflict_are_state_conflicts(
    server: tuple[ThreadingHTTPServer, type[_Answers]], code: str
) -> None:
    httpd, handler = server
    handler.status = 409
    handler.body = {
        "error": {
            "type": "conflict_error",
            "code": code,
            "message": "The Turn cannot accept this input in its current state.",
            "param": None,
        }
    }
    with _client(httpd) as client, pytest.raises(ConflictError) as caught:
        client.sessions.events.create("sess_1", events=[{"type": "agent.session.input.cancel"}])
    assert caught.value.is_state_conflict
    assert not caught.value.is_idempotency_conflict


def test_idempotency_conflict_is_not_a_state_conflict(
    server: tuple[ThreadingHTTPServer, type[_Answers]],
) -> None:
    httpd, handler = server
    handler.status = 409
    handler.body = {"error": {"type": "conflict_error", "code": "idempotency_conflict"}}
    with _client(httpd) as client, pytest.raises(ConflictError) as caught:
        client.sessions.delete("sess_1")
    assert caught.value.is_idempotency_conflict
    assert not caught.value.is_state_conflict


def test_deleting_a_busy_session_either_way(
    server: tuple[ThreadingHTTPServer, type[_Answers]],
) -> None:
    httpd, handler = server
    handler.status = 200
    handler.body = {"id": "sess_1", "object": "agent.session.deleted", "deleted": True}
    with _client(httpd) as client:
        assert client.sessions.delete("sess_1").deleted
        handler.status = 409
        handler.body = {
            "error": {
                "type": "conflict_error",
                "code": "conflict_error",
                "message": "session must be durably idle or failed without required actions "
                "before deletion",
                "param": None,
            }
        }
        with pytest.raises(ConflictError) as caught:
            client.sessions.delete("sess_1")
    assert caught.value.is_state_conflict
