"""The judge gateway as a real process between real HTTP clients and a real stand-in judge.

The stand-in (tests/harness/fixed_judge.py) answers every chat completion after a fixed latency and
counts how many were in flight at it at once: what the gateway promises to bound.
"""

from __future__ import annotations

import asyncio
import json
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
        "agent.judges.gateway",
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
