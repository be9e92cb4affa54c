"""The judge gateway: a small process in front of one judge that every client of the run talks to.

Why: the run's judges serve clients we do not write (the MILES trainer's judge client, a driver's own
HTTP code). The gateway makes every request evidence and bounds it, whoever sends it:

- pass-through: every OpenAI-compatible request (chat completions, completions, /v1/models,
  /tokenize, /health, ...) goes to the judge as it came, headers less the hop-by-hop ones and our
  canary mark; the reply comes back as it is, streamed as it arrives (an event stream stays one);
- one line per request in judge-gateway-NAME.jsonl (agent/judges/gateway_log.py);
- ``max_concurrent_calls`` for all callers together: a generating request (chat completions,
  completions) waits for one of that many slots, first come first served; ``GET /gateway/status``
  shows the slots in use and the queue (and each line its wait);
- the judge's ``timeout`` per request: no head within it is a 504 (outcome ``timeout``), the judge's
  connection is closed so it stops generating;
- a managed judge's own address is known once it is healthy: the agent writes it to the gateway's
  upstream file then; until then requests get 503 ``not ready`` (retryable for every OpenAI client).

The agent supervises it like the judge itself: its exit fails the run as the judge's failure.

The HTTP stack is h11 (HTTP/1.1 as a pure state machine, the parser under uvicorn and httpcore) on
asyncio streams, both towards the callers and towards the judge: already installed (httpx needs it),
nothing added to the agent's image, and the whole request path in one event loop we control
(README, "Judge gateway", measures what it adds).
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
from pathlib import Path
from urllib.parse import urlsplit

import h11

from agent.judges.gateway_log import GatewayLog, ReplyTap, RequestLine
from agent.judges.port_file import write_port_file
from schemas.vocab import GatewayOutcome

__all__ = ["CANARY_HEADER", "GENERATION_PATHS", "STATUS_PATH", "main"]

CANARY_HEADER = "x-gym-canary"  # the agent's canary client marks its requests with it (stripped here)
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
        CANARY_HEADER.encode(),
    }
)
MAX_BODY = 64 << 20  # a grading request is kilobytes; a larger body is refused (413)
READ_CHUNK = 1 << 16
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
        self.reader, self.writer = reader, writer
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = time.monotonic()
        self.reused = False

    def close(self) -> None:
        self.writer.close()


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
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=1 << 20)
        peer = writer.get_extra_info("peername")
        caller = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                got = await self._read_request(conn, reader, writer, caller)
                if got is None:
                    break
                request, body, t0 = got
                await self._handle(conn, writer, caller, request, body, t0)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    break
                conn.start_next_cycle()
        except (ConnectionError, h11.ProtocolError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, caller: str
    ) -> tuple[h11.Request, bytes, float] | None:
        request: h11.Request | None = None
        body = bytearray()
        t0 = 0.0
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                await self._refuse(conn, writer, caller, request, t0, 400, f"bad request: {exc}")
                return None
            if event is h11.NEED_DATA:
                data = await reader.read(READ_CHUNK)
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                request, t0 = event, time.time()
                if conn.they_are_waiting_for_100_continue:
                    writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_BODY:
                    await self._refuse(conn, writer, caller, request, t0, 413, f"request body over {MAX_BODY} bytes")
                    return None
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                return request, bytes(body), t0
            else:  # ConnectionClosed, or PAUSED: nothing more from this caller
                return None

    async def _refuse(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        caller: str,
        request: h11.Request | None,
        t0: float,
        status: int,
        message: str,
    ) -> None:
        line = self._line(caller, request, b"", t0 or time.time())
        line.outcome = GatewayOutcome.BAD_REQUEST
        with contextlib.suppress(h11.LocalProtocolError, ConnectionError):
            line.bytes_out = await self._send_json(conn, writer, status, {"object": "error", "message": message})
            line.status = status
        line.error = message
        self._finish(line)

    def _line(self, caller: str, request: h11.Request | None, body: bytes, t0: float) -> RequestLine:
        method = request.method.decode("ascii", "replace") if request is not None else "?"
        path = request.target.split(b"?", 1)[0].decode("utf-8", "replace") if request is not None else "?"
        canary = request is not None and any(k == CANARY_HEADER.encode() for k, _ in request.headers)
        return RequestLine(
            at=t0,
            caller=caller,
            method=method,
            path=path,
            generation=method == "POST" and path in GENERATION_PATHS,
            canary=canary,
            request_sha256=hashlib.sha256(body).hexdigest(),
            bytes_in=len(body),
        )

    def _finish(self, line: RequestLine) -> None:
        line.latency_ms = (time.time() - line.at) * 1000
        self.served += 1
        if self.log is not None:
            self.log.add(line)

    async def _handle(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        caller: str,
        request: h11.Request,
        body: bytes,
        t0: float,
    ) -> None:
        line = self._line(caller, request, body, t0)
        if line.method == "GET" and line.path == STATUS_PATH:
            line.bytes_out = await self._send_json(conn, writer, 200, self.status())
            line.status, line.outcome = 200, GatewayOutcome.REPLIED
            self._finish(line)
            return
        upstream = self.upstream
        if upstream is None:
            message = f"judge {self.judge} is not ready yet (loading); retry"
            line.bytes_out = await self._send_json(conn, writer, 503, {"object": "error", "message": message})
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
            await self._forward(conn, writer, upstream, request, body, line)
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
            if now - c.idle_since < IDLE_UPSTREAM_S and not c.reader.at_eof():
                c.reused = True
                return c
            c.close()
        reader, writer = await asyncio.open_connection(upstream.host, upstream.port)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Conn(reader, writer)

    def _release(self, c: _Conn) -> None:
        if c.h11.our_state is h11.DONE and c.h11.their_state is h11.DONE:
            c.h11.start_next_cycle()
            c.idle_since = time.monotonic()
            self._idle.append(c)
        else:
            c.close()

    async def _next(self, c: _Conn) -> object:
        """The judge's next h11 event (an Event, or PAUSED). Bounded by the caller's deadline (one
        timer per request, not one per read)."""
        while True:
            event = c.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            c.h11.receive_data(await c.reader.read(READ_CHUNK))

    async def _send_upstream(self, upstream: Upstream, request: h11.Request, body: bytes) -> tuple[_Conn, h11.Response]:
        """Send the request; the connection and the reply's head. A kept-alive connection the judge
        closed meanwhile (nothing of a reply read) is retried once on a new one."""
        headers = [(k, v) for k, v in request.headers if k not in HOP_HEADERS]
        headers += [(b"host", upstream.authority), (b"content-length", str(len(body)).encode())]
        out = h11.Request(method=request.method, target=request.target, headers=headers)
        for attempt in (1, 2):
            try:
                c = await self._connection(upstream)
            except (OSError, TimeoutError) as exc:
                raise UpstreamError(f"cannot connect to the judge: {exc or type(exc).__name__}") from None
            try:
                c.writer.write(c.h11.send(out) + c.h11.send(h11.Data(data=body)) + c.h11.send(h11.EndOfMessage()))
                await c.writer.drain()
                while True:
                    event = await self._next(c)
                    if isinstance(event, h11.Response):
                        return c, event
                    if not isinstance(event, h11.InformationalResponse):
                        raise UpstreamError(f"the judge closed the connection without a reply ({type(event).__name__})")
            except UpstreamError as exc:
                c.close()
                if exc.outcome is GatewayOutcome.UNAVAILABLE and c.reused and attempt == 1:
                    continue
                raise
            except (ConnectionError, OSError, h11.ProtocolError) as exc:
                c.close()
                if c.reused and attempt == 1:
                    continue
                raise UpstreamError(f"the judge's connection failed: {exc or type(exc).__name__}") from None
            except asyncio.CancelledError:
                c.close()  # the judge's timeout: closing the connection stops its work on the request
                raise
        raise AssertionError("unreachable")

    async def _forward(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        upstream: Upstream,
        request: h11.Request,
        body: bytes,
        line: RequestLine,
    ) -> None:
        sent0 = time.monotonic()
        timeout = f"no answer within the judge's timeout {self.timeout:g} s"
        try:
            async with asyncio.timeout(self.timeout):
                c, head = await self._send_upstream(upstream, request, body)
        except TimeoutError:
            error: UpstreamError | None = UpstreamError(timeout, GatewayOutcome.TIMEOUT)
        except UpstreamError as exc:
            error = exc
        else:
            error = None
        if error is not None:
            status = 504 if error.outcome is GatewayOutcome.TIMEOUT else 502
            line.outcome, line.error = error.outcome, str(error)
            with contextlib.suppress(ConnectionError, h11.LocalProtocolError):
                line.bytes_out = await self._send_json(
                    conn, writer, status, {"object": "error", "message": f"gateway: judge {self.judge}: {error}"}
                )
                line.status = status
            return
        line.first_byte_ms = (time.monotonic() - sent0) * 1000
        content_type = next((v for k, v in head.headers if k == b"content-type"), b"").decode("latin-1").lower()
        tap = ReplyTap(content_type)
        line.stream = tap.stream
        length = next((v for k, v in head.headers if k == b"content-length"), None)
        headers = [(k, v) for k, v in head.headers if k not in HOP_HEADERS]
        if length is not None:
            headers.append((b"content-length", length))
        line.status = head.status_code
        caller_ok = True
        # A whole reply goes to the caller in one write (one syscall); an event stream chunk by chunk.
        pending = conn.send(h11.Response(status_code=head.status_code, headers=headers, reason=head.reason))
        try:
            async with asyncio.timeout_at(sent0 + self.timeout):
                while True:
                    event = await self._next(c)
                    if isinstance(event, h11.Data):
                        tap.feed(event.data)
                        line.bytes_out += len(event.data)
                        if caller_ok:
                            pending += conn.send(h11.Data(data=event.data))
                            if tap.stream:
                                caller_ok = await self._flush(writer, pending)
                                pending = b""
                                if not caller_ok:
                                    break  # the caller is gone: stop the judge's work on it too
                    elif isinstance(event, h11.EndOfMessage):
                        if caller_ok:
                            caller_ok = await self._flush(writer, pending + conn.send(h11.EndOfMessage()))
                        break
                    else:
                        raise UpstreamError("the judge closed the connection in the middle of its reply")
        except (UpstreamError, TimeoutError) as exc:
            c.close()
            cut = exc if isinstance(exc, UpstreamError) else UpstreamError(timeout, GatewayOutcome.TIMEOUT)
            line.outcome, line.error = cut.outcome, str(cut)
            tap.finish()
            self._tokens(line, tap)
            raise ConnectionError("the reply was cut off") from None  # the caller's connection ends too
        except (ConnectionError, OSError, h11.ProtocolError) as exc:
            c.close()
            line.outcome, line.error = GatewayOutcome.UNAVAILABLE, f"the judge's connection failed: {exc}"
            raise ConnectionError("the reply was cut off") from None
        tap.finish()
        self._tokens(line, tap)
        if not caller_ok:
            c.close()
            line.outcome, line.error = GatewayOutcome.CLIENT_GONE, "the caller closed its connection first"
            raise ConnectionError("the caller is gone")
        self._release(c)
        line.outcome = GatewayOutcome.REPLIED if 200 <= head.status_code < 300 else GatewayOutcome.HTTP_ERROR

    @staticmethod
    async def _flush(writer: asyncio.StreamWriter, data: bytes) -> bool:
        """Write to the caller; False when it is gone."""
        try:
            writer.write(data)
            await writer.drain()
        except (ConnectionError, h11.LocalProtocolError):
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

    async def _send_json(self, conn: h11.Connection, writer: asyncio.StreamWriter, status: int, doc: object) -> int:
        payload = json.dumps(doc).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        writer.write(
            conn.send(h11.Response(status_code=status, headers=headers))
            + conn.send(h11.Data(data=payload))
            + conn.send(h11.EndOfMessage())
        )
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
    ap = argparse.ArgumentParser(prog="python -m agent.judges.gateway", description="One judge's gateway.")
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
