"""The judge gateway as a real process between real HTTP clients and a real stand-in judge.

The stand-in (tests/harness/fixed_judge.py) answers every chat completion after a fixed latency and
counts how many were in flight at it at once: what the gateway promises to bound.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from schemas import names, violations
from tests._judge_server import HOST, RunningServer, dead_port, start_module

Start = Callable[..., RunningServer]
CHAT = {"model": "fixed-judge", "messages": [{"role": "user", "content": "grade this"}], "max_tokens": 8}


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    started: list[RunningServer] = []

    def factory(module: str, *args: str) -> RunningServer:
        server = start_module(tmp_path, module, *args, name=f"p{len(started)}")
        started.append(server)
        return server

    yield factory
    for server in reversed(started):
        server.stop()


def judge(start: Start, latency: float) -> RunningServer:
    return start("tests.harness.fixed_judge", "--latency", str(latency))


def gateway(start: Start, tmp_path: Path, *args: str, calls: int = 4, timeout: float = 30) -> RunningServer:
    return start(
        "agent.judges._gateway",
        "--judge",
        "general",
        "--host",
        HOST,
        "--max-concurrent-calls",
        str(calls),
        "--timeout",
        str(timeout),
        "--run-dir",
        str(tmp_path),
        *args,
    )


def lines(tmp_path: Path, server: RunningServer) -> list[dict]:
    server.stop()  # the log thread writes what is queued before the process exits
    out = []
    for path in sorted(tmp_path.glob("judge-gateway-general*.jsonl")):
        for raw in path.read_text().splitlines():
            doc = json.loads(raw)
            assert not violations("judge-gateway", doc), violations("judge-gateway", doc)
            out.append(doc)
    return sorted(out, key=lambda d: d["seq"])


def test_requests_pass_through_unchanged_and_each_is_recorded(start: Start, tmp_path: Path) -> None:
    j = judge(start, 0.01)
    g = gateway(start, tmp_path, "--upstream", j.base_url)
    with httpx.Client(base_url=g.base_url, timeout=10) as c:
        assert c.get("/v1/models").json()["data"][0]["id"] == "fixed-judge"
        assert c.post("/tokenize", json={"model": "fixed-judge", "messages": []}).json()["count"] == 11
        reply = c.post("/v1/chat/completions", json=CHAT, headers={"X-Gym-Canary": "1"})
        assert reply.json()["choices"][0]["message"]["content"].endswith("SCORE: 7")
        with c.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as streamed:
            assert streamed.headers["content-type"] == "text/event-stream"
            events = [x for x in streamed.iter_lines() if x.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and len(events) == 4
        assert c.get("/no/such/route").status_code == 404  # the judge's answer, passed on
        status = c.get("/gateway/status").json()
    assert status["max_concurrent_calls"] == 4 and status["upstream"] == j.base_url
    got = lines(tmp_path, g)
    assert [(x["method"], x["path"], x["status"]) for x in got] == [
        ("GET", "/v1/models", 200),
        ("POST", "/tokenize", 200),
        ("POST", "/v1/chat/completions", 200),
        ("POST", "/v1/chat/completions", 200),
        ("GET", "/no/such/route", 404),
        ("GET", "/gateway/status", 200),
    ]
    chat, stream = got[2], got[3]
    assert chat["canary"] and not stream["canary"] and chat["generation"] and not got[1]["generation"]
    assert (chat["prompt_tokens"], chat["completion_tokens"], chat["finish_reason"]) == (11, 5, "stop")
    assert stream["stream"] and (stream["prompt_tokens"], stream["finish_reason"]) == (11, "stop")
    assert got[4]["outcome"] == "http_error" and {x["outcome"] for x in got[:4]} == {"replied"}
    assert all(x["caller"].startswith(HOST + ":") and len(x["request_sha256"]) == 64 for x in got)


def test_64_callers_never_put_more_than_max_concurrent_calls_at_the_judge(start: Start, tmp_path: Path) -> None:
    j = judge(start, 0.2)
    g = gateway(start, tmp_path, "--upstream", j.base_url, calls=4)

    async def call_all() -> list[int]:
        async with httpx.AsyncClient(base_url=g.base_url, timeout=60, limits=httpx.Limits(max_connections=64)) as c:
            replies = await asyncio.gather(*(c.post("/v1/chat/completions", json=CHAT) for _ in range(64)))
        return [r.status_code for r in replies]

    assert asyncio.run(call_all()) == [200] * 64
    stats = httpx.get(j.base_url + "/stats").json()
    # Never more than 4 at once at the judge; and 4 were (the callers did overlap).
    assert stats == {"max_in_flight": 4, "served": 64}
    got = [x for x in lines(tmp_path, g) if x["generation"]]
    assert len(got) == 64 and {x["outcome"] for x in got} == {"replied"}
    # 64 calls through 4 slots of 0.2 s: the last waited for about 15 rounds before its turn.
    assert max(x["queue_ms"] for x in got) > 10 * 200


def test_a_judge_not_yet_healthy_is_503_until_its_address_is_written(start: Start, tmp_path: Path) -> None:
    upstream_file = tmp_path / "upstream"
    g = gateway(start, tmp_path, "--upstream-file", str(upstream_file))
    first = httpx.post(g.base_url + "/v1/chat/completions", json=CHAT, timeout=10)
    assert first.status_code == 503 and "not ready" in first.json()["message"]
    j = judge(start, 0.01)
    upstream_file.write_text(j.base_url)
    for _ in range(100):
        reply = httpx.post(g.base_url + "/v1/chat/completions", json=CHAT, timeout=10)
        if reply.status_code != 503:
            break
        asyncio.run(asyncio.sleep(0.1))
    assert reply.status_code == 200
    got = lines(tmp_path, g)
    assert got[0]["outcome"] == "not_ready" and got[-1]["outcome"] == "replied"


def test_a_slow_judge_times_out_and_a_dead_one_is_unavailable(start: Start, tmp_path: Path) -> None:
    slow = judge(start, 5)
    g = gateway(start, tmp_path, "--upstream", slow.base_url, timeout=0.5)
    reply = httpx.post(g.base_url + "/v1/chat/completions", json=CHAT, timeout=10)
    assert reply.status_code == 504 and "timeout" in reply.json()["message"]
    dead = gateway(start, tmp_path / "dead", "--upstream", f"http://{HOST}:{dead_port()}")
    assert httpx.post(dead.base_url + "/v1/chat/completions", json=CHAT, timeout=10).status_code == 502
    assert [x["outcome"] for x in lines(tmp_path, g)] == ["timeout"]


def test_the_request_log_is_capped_and_rotated(start: Start, tmp_path: Path) -> None:
    j = judge(start, 0)
    g = gateway(start, tmp_path, "--upstream", j.base_url, "--log-max-bytes", "3000", "--log-keep", "1")
    with httpx.Client(base_url=g.base_url, timeout=10) as c:
        for _ in range(30):
            assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
    kept = lines(tmp_path, g)
    files = sorted(p.name for p in tmp_path.glob("judge-gateway-general*.jsonl"))
    assert files == [names.gateway_log("general", 1), names.gateway_log("general")]
    assert all(p.stat().st_size <= 3000 for p in tmp_path.glob("judge-gateway-*.jsonl"))
    assert kept[-1]["seq"] == 30 and len(kept) < 30  # the oldest lines were rotated away; seq says how many


def _raw(port: int, data: bytes, *, until: bytes | None = None, wait_close: bool = False) -> bytes:
    """Send raw bytes to the gateway; read until ``until`` appears (or the gateway closes)."""
    with socket.create_connection((HOST, port), timeout=10) as s:
        s.sendall(data)
        got = b""
        while (until is None or until not in got) or wait_close:
            more = s.recv(65536)
            if not more:
                break
            got += more
        return got


def test_http11_framing_pipelined_chunked_continue_and_http10(start: Start, tmp_path: Path) -> None:
    j = judge(start, 0)
    g = gateway(start, tmp_path, "--upstream", j.base_url)
    body = json.dumps(CHAT).encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    # Two requests in one write: two replies, in order, on one connection.
    one = head + b"content-length: %d\r\n\r\n" % len(body) + body
    with socket.create_connection((HOST, g.port), timeout=10) as s:
        s.sendall(one + one)
        got = b""
        while got.count(b"SCORE: 7") < 2:
            got += s.recv(65536)
    assert got.count(b"HTTP/1.1 200 ") == 2
    # A chunked request body reaches the judge whole (the log's digest is the body's).
    chunked = head + b"transfer-encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    assert b"SCORE: 7" in _raw(g.port, chunked, until=b"SCORE: 7")
    # A caller that waits for "100 Continue" gets it, then its reply.
    with socket.create_connection((HOST, g.port), timeout=10) as s:
        s.sendall(head + b"expect: 100-continue\r\ncontent-length: %d\r\n\r\n" % len(body))
        assert s.recv(65536).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(body)
        reply = b""
        while b"SCORE: 7" not in reply:
            reply += s.recv(65536)
    # An HTTP/1.0 caller: its reply, then the gateway closes.
    old = b"POST /v1/chat/completions HTTP/1.0\r\ncontent-length: %d\r\n\r\n" % len(body) + body
    assert b"SCORE: 7" in _raw(g.port, old, wait_close=True)
    # Not HTTP: 400, recorded as a bad request.
    assert _raw(g.port, b"\x00\x01 nonsense\r\n\r\n", wait_close=True).startswith(b"HTTP/1.1 400 ")
    got_lines = lines(tmp_path, g)
    chats = [x for x in got_lines if x["path"] == "/v1/chat/completions"]
    assert len(chats) == 5 and {x["outcome"] for x in chats} == {"replied"}
    assert {x["request_sha256"] for x in chats} == {hashlib.sha256(body).hexdigest()}
    assert got_lines[-1]["outcome"] == "bad_request" and got_lines[-1]["status"] == 400


def test_a_reply_framed_by_closing_reaches_the_caller_whole(start: Start, tmp_path: Path) -> None:
    """A judge that ends its reply by closing the connection (no length, no chunks): the caller
    gets the whole body (chunked by the gateway), the line its tokens."""
    reply = json.dumps(
        {"choices": [{"finish_reason": "length"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    )
    with socket.create_server((HOST, 0)) as listener:

        def serve() -> None:
            for _ in range(2):
                conn, _ = listener.accept()
                with conn:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        data += conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n" + reply.encode())

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        g = gateway(start, tmp_path, "--upstream", f"http://{HOST}:{listener.getsockname()[1]}")
        with httpx.Client(base_url=g.base_url, timeout=10) as c:
            for _ in range(2):  # the second on a new connection to the judge: the first one was closed
                r = c.post("/v1/chat/completions", json=CHAT)
                assert r.status_code == 200 and r.json() == json.loads(reply)
                assert r.headers["transfer-encoding"] == "chunked"
        t.join(10)
    got = lines(tmp_path, g)
    assert [(x["outcome"], x["finish_reason"], x["completion_tokens"]) for x in got] == [("replied", "length", 2)] * 2
