"""The judge gateway: a small process in front of one judge that every client of the run talks to.

Why: the run's judges serve clients we do not write (the MILES trainer's judge client, a driver's own
HTTP code). The gateway makes every request evidence and bounds it, whoever sends it:

- pass-through: every OpenAI-compatible request (chat completions, completions, /v1/models,
  /tokenize, /health, ...) goes to the judge as it came, headers less the hop-by-hop ones and our
  canary mark; the reply comes back as it is, streamed as it arrives (an event stream stays one);
- one line per request in judge-gateway-NAME.jsonl (agent/judges/_gateway_log.py);
- ``max_concurrent_calls`` for all callers together: a generating request (chat completions,
  completions) waits for one of that many slots, first come first served; ``GET /gateway/status``
  shows the slots in use and the queue (and each line its wait);
- the judge's ``timeout`` per request: no head within it is a 504 (outcome ``timeout``), the judge's
  connection is closed so it stops generating;
- a managed judge's own address is known once it is healthy: the agent writes it to the gateway's
  upstream file then; until then requests get 503 ``not ready`` (retryable for every OpenAI client).

The agent supervises it like the judge itself: its exit fails the run as the judge's failure.

The HTTP stack is asyncio streams with httptools (llhttp, the C parser under uvicorn) for the
framing (agent/judges/_http1.py), towards the callers and towards the judge: the whole request path in
one event loop we control, and the parsing in C, where h11 (pure Python) cost about half of the
gateway's time per request (docs/guides/judges.md, "Judge gateway", measures what it adds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from urllib.parse import urlsplit

from agent.judges import _http1 as http1
from agent.judges._gateway_log import GatewayLog, ReplyTap, RequestLine
from agent.judges._port_file import write_port_file
from schemas.vocab import GatewayOutcome

__all__ = ["CANARY_HEADER", "GENERATION_PATHS", "STATUS_PATH", "main"]

CANARY_HEADER = "x-gym-canary"  # the agent's canary client marks its requests with it (stripped here)
CANARY_BYTES = CANARY_HEADER.encode()
STATUS_PATH = "/gateway/status"
# Requests that make the judge generate: they hold a max_concurrent_calls slot.
GENERATION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/chat/completions", "/completions"})
# Never forwarded: they describe one hop, not the request (RFC 9110 7.6.1), or are set per hop.
HOP_HEADERS = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
        b"expect",  # the gateway answers "100-continue" itself and sends the judge the whole body
        CANARY_BYTES,
    }
)
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
MAX_BODY = 64 << 20  # a grading request is kilobytes; a larger body is refused (413)
IDLE_UPSTREAM_S = 4.0  # an idle connection to the judge older than this is not reused (uvicorn closes at 5 s)
UPSTREAM_POLL_S = 0.2


@dataclass(frozen=True)
class Upstream:
    host: str
    port: int
    authority: bytes  # the Host header the judge expects

    @classmethod
    def parse(cls, url: str) -> Upstream:
        parts = urlsplit(url.strip())
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the gateway forwards to http:// judges only, not {url!r}")
        port = parts.port or 80
        host = parts.hostname
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return cls(host, port, authority.encode())


class UpstreamError(Exception):
    """The judge gave no whole answer (refused, dropped, timed out)."""

    def __init__(self, message: str, outcome: GatewayOutcome = GatewayOutcome.UNAVAILABLE) -> None:
        super().__init__(message)
        self.outcome = outcome


class _Conn:
    """One keep-alive connection to the judge."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.replies = http1.ResponseReader(reader)
        self.idle_since = time.monotonic()
        self.reused = False
        self.at_eof = reader.at_eof

    def close(self) -> None:
        self.writer.close()


@dataclass(frozen=True)
class _Framing:
    """How a reply goes to the caller."""

    head: bytes  # the status line and headers the caller gets
    chunked: bool  # the body in chunks: the judge gave no length, the caller speaks HTTP/1.1
    close: bool  # the connection ends with the reply: the caller asked, or it frames an HTTP/1.0 body
    head_only: bool  # a reply to HEAD: no body follows


def _framing(request: http1.Request, head: http1.Head) -> _Framing:
    """The body's framing towards the caller: the judge's length where it gave one, else chunks
    (an HTTP/1.0 caller: the body until we close)."""
    close = not request.keep_alive
    head_only = request.method == b"HEAD"
    no_body = head_only or head.status in (204, 304)
    length = head.header(b"content-length")
    headers = [(k, v) for k, v in head.headers if k not in HOP_HEADERS]
    chunked = False
    if length is not None:
        headers.append((b"content-length", length))
    elif not no_body:
        if request.http10:
            close = True
        else:
            chunked = True
            headers.append((b"transfer-encoding", b"chunked"))
    if close:
        headers.append((b"connection", b"close"))
    return _Framing(http1.response_head(head.status, head.reason, headers), chunked, close, head_only)


class Gateway:
    def __init__(self, args: argparse.Namespace, log: GatewayLog | None) -> None:
        self.judge = args.judge
        self.max_calls = args.max_concurrent_calls
        self.timeout = float(args.timeout)
        self.log = log
        self.upstream_file = args.upstream_file
        self.upstream: Upstream | None = Upstream.parse(args.upstream) if args.upstream else None
        self.slots = asyncio.Semaphore(self.max_calls)
        self.in_flight = 0
        self.queued = 0
        self.served = 0
        self.peak_in_flight = 0
        self.started = time.time()
        self._idle: list[_Conn] = []

    # -- the judge's address ---------------------------------------------------------------------

    async def watch_upstream(self) -> None:
        """Read the upstream file once the agent writes it (a managed judge became healthy)."""
        while self.upstream is None and self.upstream_file:
            with contextlib.suppress(OSError, ValueError):
                url = Path(self.upstream_file).read_text(encoding="utf-8").strip()
                if url:
                    self.upstream = Upstream.parse(url)
                    print(f"gateway {self.judge}: forwarding to {url}", flush=True)
                    return
            await asyncio.sleep(UPSTREAM_POLL_S)

    # -- callers ---------------------------------------------------------------------------------

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        caller = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        requests = http1.RequestReader(reader, max_body=MAX_BODY, writer=writer)
        try:
            while True:
                try:
                    request = await requests.next()
                except http1.ProtocolError as exc:
                    await self._refuse(writer, caller, exc)
                    break
                if request is None:
                    break
                await self._handle(writer, caller, request)
                if not request.keep_alive:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _refuse(self, writer: asyncio.StreamWriter, caller: str, error: http1.ProtocolError) -> None:
        line = self._line(caller, error.request)
        line.outcome = GatewayOutcome.BAD_REQUEST
        with contextlib.suppress(ConnectionError):
            doc = {"object": "error", "message": str(error)}
            line.bytes_out = await self._send_json(writer, error.status, doc, close=True)
            line.status = error.status
        line.error = str(error)
        self._finish(line)

    def _line(self, caller: str, request: http1.Request | None) -> RequestLine:
        if request is None:
            return RequestLine(
                at=time.time(),
                caller=caller,
                method="?",
                path="?",
                generation=False,
                canary=False,
                request_sha256=EMPTY_SHA256,
                bytes_in=0,
            )
        method = request.method.decode("ascii", "replace")
        path = request.target.split(b"?", 1)[0].decode("utf-8", "replace")
        return RequestLine(
            at=request.at,
            caller=caller,
            method=method,
            path=path,
            generation=method == "POST" and path in GENERATION_PATHS,
            canary=any(k == CANARY_BYTES for k, _ in request.headers),
            request_sha256=hashlib.sha256(request.body).hexdigest(),
            bytes_in=len(request.body),
        )

    def _finish(self, line: RequestLine) -> None:
        line.latency_ms = (time.time() - line.at) * 1000
        self.served += 1
        if self.log is not None:
            self.log.add(line)

    async def _handle(self, writer: asyncio.StreamWriter, caller: str, request: http1.Request) -> None:
        line = self._line(caller, request)
        close = not request.keep_alive
        if line.method == "GET" and line.path == STATUS_PATH:
            line.bytes_out = await self._send_json(writer, 200, self.status(), close=close)
            line.status, line.outcome = 200, GatewayOutcome.REPLIED
            self._finish(line)
            return
        upstream = self.upstream
        if upstream is None:
            message = f"judge {self.judge} is not ready yet (loading); retry"
            line.bytes_out = await self._send_json(writer, 503, {"object": "error", "message": message}, close=close)
            line.status, line.outcome, line.error = 503, GatewayOutcome.NOT_READY, message
            self._finish(line)
            return
        if line.generation:
            self.queued += 1
            q0 = time.monotonic()
            try:
                await self.slots.acquire()
            finally:
                self.queued -= 1
            line.queue_ms = (time.monotonic() - q0) * 1000
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            await self._forward(writer, upstream, request, line)
        finally:
            if line.generation:
                self.in_flight -= 1
                self.slots.release()
            self._finish(line)

    # -- the judge -------------------------------------------------------------------------------

    async def _connection(self, upstream: Upstream) -> _Conn:
        now = time.monotonic()
        while self._idle:
            c = self._idle.pop()
            if now - c.idle_since < IDLE_UPSTREAM_S and not c.at_eof():
                c.reused = True
                return c
            c.close()
        reader, writer = await asyncio.open_connection(upstream.host, upstream.port)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Conn(reader, writer)

    def _release(self, c: _Conn, keep_alive: bool) -> None:
        if keep_alive:
            c.idle_since = time.monotonic()
            self._idle.append(c)
        else:
            c.close()

    async def _send_upstream(self, upstream: Upstream, request: http1.Request) -> tuple[_Conn, http1.Head]:
        """Send the request; the connection and the reply's head. A kept-alive connection the judge
        closed meanwhile (nothing of a reply read) is retried once on a new one."""
        headers = [(k, v) for k, v in request.headers if k not in HOP_HEADERS]
        headers += [(b"host", upstream.authority), (b"content-length", b"%d" % len(request.body))]
        out = http1.request_head(request.method, request.target, headers) + request.body
        for attempt in (1, 2):
            try:
                c = await self._connection(upstream)
            except (OSError, TimeoutError) as exc:
                raise UpstreamError(f"cannot connect to the judge: {exc or type(exc).__name__}") from None
            try:
                c.writer.write(out)
                await c.writer.drain()
                event = await c.replies.next()
                if not isinstance(event, http1.Head):
                    raise http1.ProtocolError("the judge's reply did not start with a status line")
                return c, event
            except (ConnectionError, OSError, http1.ProtocolError) as exc:
                c.close()
                if c.reused and attempt == 1:
                    continue
                raise UpstreamError(f"the judge's connection failed: {exc or type(exc).__name__}") from None
            except asyncio.CancelledError:
                c.close()  # the judge's timeout: closing the connection stops its work on the request
                raise
        raise AssertionError("unreachable")

    async def _forward(
        self, writer: asyncio.StreamWriter, upstream: Upstream, request: http1.Request, line: RequestLine
    ) -> None:
        sent0 = time.monotonic()
        asked = await self._ask_judge(writer, upstream, request, line)
        if asked is None:
            return
        c, head = asked
        line.first_byte_ms = (time.monotonic() - sent0) * 1000
        line.status = head.status
        tap = ReplyTap((head.header(b"content-type") or b"").decode("latin-1").lower())
        line.stream = tap.stream
        framing = _framing(request, head)
        try:
            async with asyncio.timeout_at(sent0 + self.timeout):
                caller_ok, keep_upstream = await self._relay(c, writer, framing, tap, line)
        except (UpstreamError, TimeoutError) as exc:
            c.close()
            cut = exc if isinstance(exc, UpstreamError) else self._timed_out()
            line.outcome, line.error = cut.outcome, str(cut)
            tap.finish()
            self._tokens(line, tap)
            raise ConnectionError("the reply was cut off") from None  # the caller's connection ends too
        except (ConnectionError, OSError, http1.ProtocolError) as exc:
            c.close()
            line.outcome, line.error = GatewayOutcome.UNAVAILABLE, f"the judge's connection failed: {exc}"
            raise ConnectionError("the reply was cut off") from None
        tap.finish()
        self._tokens(line, tap)
        if not caller_ok:
            c.close()
            line.outcome, line.error = GatewayOutcome.CLIENT_GONE, "the caller closed its connection first"
            raise ConnectionError("the caller is gone")
        # After a reply to HEAD the parser cannot know where the judge's next reply starts: not reused.
        self._release(c, keep_upstream and not framing.head_only)
        line.outcome = GatewayOutcome.REPLIED if 200 <= head.status < 300 else GatewayOutcome.HTTP_ERROR
        if framing.close:
            raise ConnectionError("the reply was framed by closing the connection")

    def _timed_out(self) -> UpstreamError:
        return UpstreamError(f"no answer within the judge's timeout {self.timeout:g} s", GatewayOutcome.TIMEOUT)

    async def _ask_judge(
        self, writer: asyncio.StreamWriter, upstream: Upstream, request: http1.Request, line: RequestLine
    ) -> tuple[_Conn, http1.Head] | None:
        """The request sent and the head of the judge's reply; None when the judge gave none within
        its timeout, the caller then answered 504 (timeout) or 502 (refused, dropped) here."""
        try:
            async with asyncio.timeout(self.timeout):
                return await self._send_upstream(upstream, request)
        except TimeoutError:
            error = self._timed_out()
        except UpstreamError as exc:
            error = exc
        status = 504 if error.outcome is GatewayOutcome.TIMEOUT else 502
        line.outcome, line.error = error.outcome, str(error)
        with contextlib.suppress(ConnectionError):
            doc = {"object": "error", "message": f"gateway: judge {self.judge}: {error}"}
            line.bytes_out = await self._send_json(writer, status, doc, close=not request.keep_alive)
            line.status = status
        return None

    async def _relay(
        self, c: _Conn, writer: asyncio.StreamWriter, framing: _Framing, tap: ReplyTap, line: RequestLine
    ) -> tuple[bool, bool]:
        """The judge's reply to the caller: a whole reply in one write (one syscall), an event stream
        chunk by chunk. Whether the caller is still there, and whether the judge's connection may
        be reused."""
        pending = framing.head
        caller_ok = True
        keep_upstream = False
        while not framing.head_only:
            event = await c.replies.next()
            if isinstance(event, bytes):
                tap.feed(event)
                line.bytes_out += len(event)
                if caller_ok:
                    pending += http1.chunk(event) if framing.chunked else event
                    if tap.stream:
                        caller_ok = await self._flush(writer, pending)
                        pending = b""
                        if not caller_ok:
                            break  # the caller is gone: stop the judge's work on it too
            elif isinstance(event, http1.End):
                keep_upstream = event.keep_alive
                break
            else:
                raise UpstreamError("the judge sent a second status line in one reply")
        if caller_ok:
            caller_ok = await self._flush(writer, pending + (http1.LAST_CHUNK if framing.chunked else b""))
        return caller_ok, keep_upstream

    @staticmethod
    async def _flush(writer: asyncio.StreamWriter, data: bytes) -> bool:
        """Write to the caller; False when it is gone."""
        try:
            writer.write(data)
            await writer.drain()
        except ConnectionError:
            return False
        return True

    @staticmethod
    def _tokens(line: RequestLine, tap: ReplyTap) -> None:
        line.prompt_tokens, line.completion_tokens, line.finish_reason = (
            tap.prompt_tokens,
            tap.completion_tokens,
            tap.finish_reason,
        )

    # -- answers of its own ------------------------------------------------------------------------

    async def _send_json(self, writer: asyncio.StreamWriter, status: int, doc: object, *, close: bool) -> int:
        payload = json.dumps(doc).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload))]
        if close:
            headers.append((b"connection", b"close"))
        writer.write(http1.response_head(status, HTTPStatus(status).phrase.encode(), headers) + payload)
        await writer.drain()
        return len(payload)

    def status(self) -> dict[str, object]:
        """What ``GET /gateway/status`` answers: the slots and the queue, right now."""
        up = self.upstream
        return {
            "judge": self.judge,
            "upstream": f"http://{up.authority.decode()}" if up else None,
            "max_concurrent_calls": self.max_calls,
            "in_flight": self.in_flight,
            "queued": self.queued,
            "peak_in_flight": self.peak_in_flight,
            "served": self.served,
            "up_s": round(time.time() - self.started, 3),
        }


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m agent.judges._gateway", description="One judge's gateway.")
    ap.add_argument("--judge", required=True, help="the judge's name in the spec")
    ap.add_argument("--host", required=True, help="the address to listen on (the node's run address)")
    ap.add_argument("--port", type=int, default=0, help="0 = the kernel's choice, published in --port-file")
    ap.add_argument("--port-file", help="{host, port, pid}, written atomically once listening")
    ap.add_argument("--upstream", help="the judge's URL (an external judge)")
    ap.add_argument("--upstream-file", help="a file the judge's URL will be written to (a managed judge)")
    ap.add_argument("--max-concurrent-calls", type=int, required=True)
    ap.add_argument("--timeout", type=float, required=True, help="seconds per request, as the judge's timeout")
    ap.add_argument("--run-dir", help="where judge-gateway-NAME.jsonl goes (none: no request log)")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--attempt", type=int, default=1)
    ap.add_argument("--fingerprint", default="0" * 64)
    ap.add_argument("--log-max-bytes", type=int, default=64 << 20)
    ap.add_argument("--log-keep", type=int, default=3)
    return ap


async def _main(args: argparse.Namespace) -> int:
    log = (
        GatewayLog(
            args.run_dir,
            args.judge,
            rank=args.rank,
            attempt=args.attempt,
            fingerprint=args.fingerprint,
            max_bytes=args.log_max_bytes,
            keep=args.log_keep,
        )
        if args.run_dir
        else None
    )
    gateway = Gateway(args, log)
    server = await asyncio.start_server(gateway.serve, args.host, args.port, backlog=1024, limit=1 << 20)
    port = server.sockets[0].getsockname()[1]
    if args.port_file:
        write_port_file(args.port_file, args.host, port)
    print(
        f"gateway {args.judge}: listening on {args.host}:{port}, max_concurrent_calls {args.max_concurrent_calls}, "
        f"timeout {args.timeout:g} s, judge {'at ' + args.upstream if args.upstream else 'not ready yet'}",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watcher = asyncio.create_task(gateway.watch_upstream())
    async with server:
        await stop.wait()
    watcher.cancel()
    if log is not None:
        log.close()
    print(f"gateway {args.judge}: stopped after {gateway.served} request(s)", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.upstream and not args.upstream_file:
        print("gateway: give --upstream URL or --upstream-file PATH", file=sys.stderr)
        return 2
    if args.max_concurrent_calls < 1 or args.timeout <= 0:
        print("gateway: --max-concurrent-calls must be >= 1 and --timeout > 0", file=sys.stderr)
        return 2
    return asyncio.run(_main(args))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
