"""judge-gateway-NAME.jsonl: every request a judge's gateway passed through, one JSON line each.

What a line says (schemas/judge-gateway.schema.json): when, who called (address:port), the method and
path, whether it was a generating request and a canary, the status the caller got and how the request
ended (schemas.vocab.GatewayOutcome), the latency with the queue wait inside it, the judge's tokens
and ``finish_reason`` where its reply says them, and the sha256 of the request body (never the body:
prompts stay with the grades). The file is capped and rotated like grades-RANK.jsonl (the same
RotatingLog and the same ``[judging] grades_max_bytes`` / ``grades_keep``).

Lines are serialized, redacted (schemas/credentials.py) and written by a thread of their own: the
gateway's event loop only queues them, so a slow shared filesystem delays the record, never a
reply. The thread wakes every FLUSH_S and appends what came meanwhile in one write: a wake-up per
request (the queue's own signal) cost the event loop about as much as the request's parsing. A
batch the run directory refuses is counted line by line, said once on stderr, and its ``seq``
numbers stay a gap.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson

from agent.judges._grade_log import PartlyWritten, RotatingLog
from schemas import credentials, names
from schemas.timefmt import iso_ms
from schemas.vocab import GatewayOutcome

__all__ = ["GatewayLog", "RequestLine", "ReplyTap"]

ERROR_CHARS = 600
TAP_JSON_BYTES = 4 << 20  # a JSON reply is read for its usage up to this size (judge replies are small)
TAP_LINE_BYTES = 1 << 16  # one event-stream line longer than this is not parsed
FLUSH_S = 0.05  # a line reaches the file at most this late


@dataclass
class RequestLine:
    """One request's facts, filled in as it is served."""

    at: float
    caller: str
    method: str
    path: str
    generation: bool
    canary: bool
    request_sha256: str
    bytes_in: int
    stream: bool = False
    status: int | None = None
    outcome: GatewayOutcome = GatewayOutcome.UNAVAILABLE
    latency_ms: float = 0.0
    queue_ms: float = 0.0
    first_byte_ms: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    bytes_out: int = 0
    error: str | None = None


class ReplyTap:
    """Reads a reply's tokens and finish_reason as it passes: a JSON body (kept up to a cap) or an
    event stream (``data: {...}`` lines, the last finish_reason and usage seen)."""

    def __init__(self, content_type: str) -> None:
        self.stream = content_type.startswith("text/event-stream")
        self._json = not self.stream and "json" in content_type
        self._buf = bytearray()
        self._over = False
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.finish_reason: str | None = None

    def feed(self, chunk: bytes) -> None:
        if self.stream:
            self._buf += chunk
            while True:
                end = self._buf.find(b"\n")
                if end < 0:
                    if len(self._buf) > TAP_LINE_BYTES:
                        self._buf.clear()
                    return
                line = bytes(self._buf[:end]).strip()
                del self._buf[: end + 1]
                if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                    self._read(line[5:])
        elif self._json and not self._over:
            if len(self._buf) + len(chunk) > TAP_JSON_BYTES:
                self._over = True
                self._buf.clear()
            else:
                self._buf += chunk

    def finish(self) -> None:
        if self._json and not self._over and self._buf:
            self._read(bytes(self._buf))
        self._buf.clear()

    def _read(self, raw: bytes) -> None:
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return
        if not isinstance(doc, dict):
            return
        usage = doc.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = _count(usage.get("prompt_tokens"), self.prompt_tokens)
            self.completion_tokens = _count(usage.get("completion_tokens"), self.completion_tokens)
        choices = doc.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            finish = choices[0].get("finish_reason")
            if isinstance(finish, str):
                self.finish_reason = finish[:64]


def _count(value: Any, old: int | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else old


class GatewayLog:
    """The gateway's request log: lines queued by the event loop, appended by a thread."""

    def __init__(
        self,
        run_dir: str,
        judge: str,
        *,
        rank: int,
        attempt: int,
        fingerprint: str,
        max_bytes: int,
        keep: int,
    ) -> None:
        self.judge = judge
        self.rank = rank
        self.attempt = attempt
        self.fingerprint = fingerprint
        self.writer = os.urandom(6).hex()
        self.log = RotatingLog(run_dir, partial(names.gateway_log, judge), max_bytes=max_bytes, keep=keep)
        self.lost = 0
        self._seq = 0
        self._queue: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-log", daemon=True)
        self._thread.start()

    def add(self, line: RequestLine) -> None:
        """Queue one request's line (called from the event loop: no I/O here)."""
        self._seq += 1
        doc = {
            "schema": "judge-gateway",
            "schema_version": 1,
            "seq": self._seq,
            "writer": self.writer,
            "at": iso_ms(line.at),
            "judge": self.judge,
            "rank": self.rank,
            "attempt": self.attempt,
            "fingerprint": self.fingerprint,
            "caller": line.caller,
            "method": line.method[:16],
            "path": line.path[:300],
            "generation": line.generation,
            "canary": line.canary,
            "stream": line.stream,
            "status": line.status,
            "outcome": str(line.outcome),
            "latency_ms": round(line.latency_ms, 3),
            "queue_ms": round(line.queue_ms, 3),
            "first_byte_ms": None if line.first_byte_ms is None else round(line.first_byte_ms, 3),
            "prompt_tokens": line.prompt_tokens,
            "completion_tokens": line.completion_tokens,
            "finish_reason": line.finish_reason,
            "request_sha256": line.request_sha256,
            "bytes_in": line.bytes_in,
            "bytes_out": line.bytes_out,
            "error": line.error[:ERROR_CHARS] if line.error is not None else None,
        }
        self._queue.put(doc)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued, then stop the thread."""
        self._stop.set()
        self._thread.join(timeout)
        self.log.close()

    def _run(self) -> None:
        while True:
            stopping = self._stop.wait(FLUSH_S)
            batch: list[bytes] = []
            with contextlib.suppress(queue.Empty):
                while True:
                    # Serialized here, off the event loop, through the one redaction (a path's
                    # query or an error may quote a credential).
                    batch.append(orjson.dumps(credentials.redact(self._queue.get_nowait())) + b"\n")
            if batch:
                self._write(batch)
            if stopping:
                return

    def _write(self, batch: list[bytes]) -> None:
        try:
            self.log.append_many(batch)
            return
        except PartlyWritten as exc:
            batch = batch[exc.written :]
        except OSError:
            pass
        for line in batch:  # line by line: which of them the run directory refuses
            try:
                self.log.append(line)
            except OSError as exc:
                self.lost += 1
                if self.lost == 1:
                    print(
                        f"gateway {self.judge}: cannot write {self.log.relpath} ({exc}); requests go on, "
                        "unrecorded (a gap in seq shows how many); this is said once",
                        file=sys.stderr,
                        flush=True,
                    )
