"""HTTP/1.1 framing for the judge gateway: messages read with httptools over asyncio streams, and
the few heads the gateway writes itself.

Why httptools: it is llhttp (Node.js's parser, the one under uvicorn) in C. The gateway's first
stack, h11, parsed and built each message in Python: about half of the gateway's CPU per request,
and what made a request through it measurably slower than a request straight at the judge (docs/guides/judges.md,
"Judge gateway"). Here the parser does the framing (content-length, chunked, pipelined requests,
keep-alive); this module only collects what it reports and writes plain HTTP/1.1 heads.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass

import httptools

__all__ = [
    "CONTINUE",
    "LAST_CHUNK",
    "End",
    "Head",
    "ProtocolError",
    "Request",
    "RequestReader",
    "ResponseReader",
    "chunk",
    "request_head",
    "response_head",
]

READ_CHUNK = 1 << 16
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
LAST_CHUNK = b"0\r\n\r\n"


@dataclass(frozen=True)
class Request:
    """One whole request from a caller. Header names are lower case."""

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    at: float  # time.time() when its head was read
    keep_alive: bool  # the caller keeps the connection open after this request
    http10: bool  # an HTTP/1.0 caller: no chunked replies for it


@dataclass(frozen=True)
class Head:
    """A reply's status line and headers (names lower case), as the judge sent them."""

    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]

    def header(self, name: bytes) -> bytes | None:
        return next((v for k, v in self.headers if k == name), None)


@dataclass(frozen=True)
class End:
    """A reply is whole; ``keep_alive``: its connection may carry the next request."""

    keep_alive: bool


class ProtocolError(Exception):
    """Bytes that are not HTTP/1.1 we pass on; ``status`` is what a caller is answered."""

    def __init__(self, message: str, status: int = 400, request: Request | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.request = request  # what was read of it (its head), for the request's record


class RequestReader:
    """The requests of one caller's connection, in order (pipelined ones too), each read whole."""

    def __init__(self, reader: asyncio.StreamReader, *, max_body: int, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer  # for "100 Continue" to a caller that waits for it
        self._max_body = max_body
        self._parser = httptools.HttpRequestParser(self)
        self._ready: deque[Request] = deque()
        self._begun = False
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body = bytearray()
        self._at = 0.0
        self._over = False

    async def next(self) -> Request | None:
        """The next whole request; None when the caller closed its connection between requests."""
        while not self._ready:
            data = await self._reader.read(READ_CHUNK)
            if not data:
                if self._begun:
                    raise ProtocolError("the caller closed its connection in the middle of a request")
                return None
            try:
                self._parser.feed_data(data)
            except httptools.HttpParserUpgrade:
                raise ProtocolError("protocol upgrades are not passed through", 501, self._partial()) from None
            except httptools.HttpParserError as exc:
                raise ProtocolError(f"bad request: {exc}", 400, self._partial()) from None
            if self._over:
                raise ProtocolError(f"request body over {self._max_body} bytes", 413, self._partial())
        return self._ready.popleft()

    def _partial(self) -> Request | None:
        if not self._at:
            return None
        return Request(self._parser.get_method(), self._url, self._headers, b"", self._at, False, False)

    # -- the parser's callbacks --

    def on_message_begin(self) -> None:
        self._begun, self._url, self._headers, self._body, self._at, self._over = True, b"", [], bytearray(), 0.0, False

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self._at = time.time()
        if any(k == b"expect" and v.lower() == b"100-continue" for k, v in self._headers):
            self._writer.write(CONTINUE)

    def on_body(self, body: bytes) -> None:
        if len(self._body) + len(body) > self._max_body:
            self._over = True
        elif not self._over:
            self._body += body

    def on_message_complete(self) -> None:
        p = self._parser
        self._ready.append(
            Request(
                p.get_method(),
                self._url,
                self._headers,
                bytes(self._body),
                self._at,
                p.should_keep_alive(),
                p.get_http_version() == "1.0",
            )
        )
        self._begun = False


class ResponseReader:
    """The replies on one connection to the judge: a Head, the body's chunks as they arrive
    (bytes, chunked framing removed), then an End."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self._parser = httptools.HttpResponseParser(self)
        self._events: deque[Head | bytes | End] = deque()
        self._reason = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._informational = False
        self._until_close = False  # a body without length or chunks: it ends when the judge closes

    async def next(self) -> Head | bytes | End:
        """The next event; raises ConnectionError when the judge closed before the reply ended,
        ProtocolError on a reply that is not HTTP/1.1."""
        while not self._events:
            data = await self._reader.read(READ_CHUNK)
            if not data:
                if self._until_close:
                    self._until_close = False
                    return End(keep_alive=False)
                raise ConnectionError("the judge closed the connection")
            try:
                self._parser.feed_data(data)
            except httptools.HttpParserError as exc:
                raise ProtocolError(f"the judge's reply is not HTTP/1.1: {exc}") from None
        return self._events.popleft()

    # -- the parser's callbacks --

    def on_message_begin(self) -> None:
        self._reason, self._headers = b"", []

    def on_status(self, reason: bytes) -> None:
        self._reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        self._informational = 100 <= status < 200  # "100 Continue" and the like: not the reply
        if self._informational:
            return
        head = Head(status, self._reason, self._headers)
        chunked = b"chunked" in (head.header(b"transfer-encoding") or b"").lower()
        self._until_close = head.header(b"content-length") is None and not chunked and status not in (204, 304)
        self._events.append(head)

    def on_body(self, body: bytes) -> None:
        self._events.append(body)

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        self._until_close = False
        self._events.append(End(keep_alive=self._parser.should_keep_alive()))


def _lines(headers: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(k + b": " + v + b"\r\n" for k, v in headers)


def request_head(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    return method + b" " + target + b" HTTP/1.1\r\n" + _lines(headers) + b"\r\n"


def response_head(status: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    return b"HTTP/1.1 %d %s\r\n" % (status, reason) + _lines(headers) + b"\r\n"


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (never empty: an empty chunk ends the body)."""
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""
