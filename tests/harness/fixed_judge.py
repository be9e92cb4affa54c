"""A stand-in judge with a fixed latency that counts what is in flight at it (tests and `make bench`).

    python -m tests.harness.fixed_judge --latency 0.05 --port-file F [--host 127.0.0.1] [--reply TEXT]

OpenAI-compatible where the gateway and the clients need it: POST /v1/chat/completions answers after
exactly ``--latency`` seconds (``"stream": true``: an event stream of three chunks, the last with the
finish_reason and usage), GET /v1/models, POST /tokenize, GET /health. GET /stats answers how many chat
completions were in flight at most at once, and how many it served. One asyncio event loop (h11), so
64 callers in flight cost it almost nothing: the latency is the judge's, not the machine's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import h11

from agent.judges._port_file import write_port_file


class Judge:
    def __init__(self, latency: float, reply: str, model: str) -> None:
        self.latency, self.reply, self.model = latency, reply, model
        self.in_flight = 0
        self.max_in_flight = 0
        self.served = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request, body = None, b""
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        conn.receive_data(await reader.read(65536))
                    elif isinstance(event, h11.Request):
                        request = event
                    elif isinstance(event, h11.Data):
                        body += event.data
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    else:
                        return
                assert request is not None
                await self.answer(conn, writer, request.target.decode(), body)
                if conn.our_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (ConnectionError, h11.ProtocolError):
            return
        finally:
            writer.close()

    async def answer(self, conn: h11.Connection, writer: asyncio.StreamWriter, path: str, body: bytes) -> None:
        if path == "/v1/chat/completions":
            doc = json.loads(body or b"{}")
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                await asyncio.sleep(self.latency)
            finally:
                self.in_flight -= 1
            self.served += 1
            usage = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
            if doc.get("stream"):
                head = h11.Response(status_code=200, headers=[(b"content-type", b"text/event-stream")])
                chunks = [
                    {"choices": [{"index": 0, "delta": {"content": self.reply[:3]}, "finish_reason": None}]},
                    {"choices": [{"index": 0, "delta": {"content": self.reply[3:]}, "finish_reason": None}]},
                    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage},
                ]
                out = conn.send(head)
                for c in chunks:
                    out += conn.send(h11.Data(data=b"data: " + json.dumps(c).encode() + b"\n\n"))
                out += conn.send(h11.Data(data=b"data: [DONE]\n\n")) + conn.send(h11.EndOfMessage())
                writer.write(out)
                await writer.drain()
                return
            message = {"role": "assistant", "content": self.reply}
            await self.send(
                conn,
                writer,
                {
                    "id": "fixed",
                    "object": "chat.completion",
                    "model": self.model,
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": usage,
                },
            )
        elif path == "/v1/models":
            await self.send(conn, writer, {"object": "list", "data": [{"id": self.model, "object": "model"}]})
        elif path in ("/tokenize", "/v1/tokenize"):
            await self.send(conn, writer, {"tokens": [1] * 11, "count": 11, "max_model_len": 32768})
        elif path == "/stats":
            await self.send(conn, writer, {"max_in_flight": self.max_in_flight, "served": self.served})
        elif path == "/health":
            await self.send(conn, writer, {})
        else:
            await self.send(conn, writer, {"message": f"no route {path}"}, 404)

    async def send(self, conn: h11.Connection, writer: asyncio.StreamWriter, doc: object, status: int = 200) -> None:
        payload = json.dumps(doc).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        writer.write(
            conn.send(h11.Response(status_code=status, headers=headers))
            + conn.send(h11.Data(data=payload))
            + conn.send(h11.EndOfMessage())
        )
        await writer.drain()


async def _main(args: argparse.Namespace) -> None:
    judge = Judge(args.latency, args.reply, args.model)
    server = await asyncio.start_server(judge.serve, args.host, 0, backlog=1024)
    write_port_file(args.port_file, args.host, server.sockets[0].getsockname()[1])
    print(f"fixed judge: latency {args.latency:g} s, started {time.time():.3f}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.harness.fixed_judge")
    ap.add_argument("--latency", type=float, required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--model", default="fixed-judge")
    ap.add_argument("--reply", default="Reasoning: fine.\nSCORE: 7")
    asyncio.run(_main(ap.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
