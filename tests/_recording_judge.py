"""A stand-in external judge: a real HTTP server (in a thread of the test process) that records every
chat request it receives and answers with a reply the test chose (a grade, a truncated reply, text
without a score). It serves /v1/models and /v1/chat/completions; /tokenize only when given a
``count`` to answer (many external services have none: without it use context_check = "none").
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOST = "127.0.0.1"


@dataclass
class Recorded:
    model: str
    reply: str = '{"REASONING": "fine", "SCORE": 7}'
    finish_reason: str = "stop"
    requests: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0
    # (reply, finish_reason) answered in turn before `reply` (a judge that answers badly, then well)
    script: list[tuple[str, str]] = field(default_factory=list)
    # HTTP statuses answered in turn to chat requests before any reply (a judge failing, then well)
    statuses: list[int] = field(default_factory=list)
    count: int | None = None  # /tokenize's answer; None: no /tokenize route
    tokenize_requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"


def _handler(state: Recorded) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass

        def _send(self, status: int, body: Any) -> None:
            payload = json.dumps(body).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:  # noqa: N802 - stdlib naming
            if self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": state.model, "object": "model"}]})
            else:
                self._send(404, {"message": f"no route GET {self.path}"})

        def do_POST(self) -> None:  # noqa: N802 - stdlib naming
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
            if self.path == "/tokenize" and state.count is not None:
                state.tokenize_requests.append(body)
                self._send(200, {"count": state.count})
                return
            if self.path != "/v1/chat/completions":
                self._send(404, {"message": f"no route POST {self.path}"})
                return
            state.requests.append(body)
            if state.statuses:
                self._send(state.statuses.pop(0), {"message": "the judge failed this request"})
                return
            reply, finish = state.script.pop(0) if state.script else (state.reply, state.finish_reason)
            self._send(
                200,
                {
                    "object": "chat.completion",
                    "model": state.model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": reply},
                            "finish_reason": finish,
                        }
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                },
            )

    return Handler


@contextmanager
def recording_judge(model: str = "stand-in", **reply: Any) -> Iterator[Recorded]:
    state = Recorded(model, **reply)
    server = ThreadingHTTPServer((HOST, 0), _handler(state))
    server.daemon_threads = True
    state.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, name="recording-judge", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
