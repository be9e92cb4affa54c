"""`make bench` judges: what the judge gateway adds to a request, and grade_many against the judge's bound.

1. Gateway vs direct: a stand-in judge with a fixed latency (tests/harness/fixed_judge.py), 1 and 64
   callers each with one keep-alive connection sending chat completions back to back for a window;
   the same load straight at the judge and through a real gateway process (max_concurrent_calls 64:
   nothing queues). Per request latency (p50, p99) and throughput; goals: p50 added <= 1 ms,
   throughput >= 0.95x direct at 64 in flight. A judge of exactly fixed latency answers 64 callers at
   the same instant, so their next requests reach the gateway as one burst it serves in turn: at 64
   callers the p50 added is about half a burst's service time, which shrinks relative to the cycle as
   the judge's latency grows.
2. grade_many: JudgeClient.grade_many through a gateway with max_concurrent_calls C in front of the
   same stand-in; grades per second against the bound C / latency; goal >= 0.9x.

The load generator is a raw asyncio + h11 client (one event loop, no pool): it costs little, so the
figures are the judge's and the gateway's, not the client's. Every process is ours, stopped by PID.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import h11

from agent.judges._port_file import read_port_file
from schemas import names

HOST = "127.0.0.1"
BODY = json.dumps(
    {"model": "fixed-judge", "messages": [{"role": "user", "content": "grade this answer"}], "max_tokens": 16}
).encode()


@contextmanager
def _process(args: list[str], tmp: Path, name: str) -> Iterator[int]:
    """``python -m ...`` in its own session; yields its published port; stopped by PID."""
    port_file = tmp / f"{name}.port.json"
    with (tmp / f"{name}.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", *args, "--port-file", str(port_file)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while (port := read_port_file(port_file)) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{args[0]} did not start: {(tmp / f'{name}.log').read_text()[-2000:]}")
            time.sleep(0.05)
        yield port
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


async def _caller(port: int, until: float, latencies: list[float], body: bytes = BODY, host: str = HOST) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    conn = h11.Connection(h11.CLIENT)
    headers = [(b"host", f"{host}:{port}".encode()), (b"content-type", b"application/json")]
    headers.append((b"content-length", str(len(body)).encode()))
    try:
        while time.monotonic() < until:
            t0 = time.perf_counter()
            writer.write(
                conn.send(h11.Request(method="POST", target="/v1/chat/completions", headers=headers))
                + conn.send(h11.Data(data=body))
                + conn.send(h11.EndOfMessage())
            )
            status = 0
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await reader.read(65536))
                elif isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    raise ConnectionError("closed")
            if status != 200:
                raise RuntimeError(f"status {status}")
            latencies.append(time.perf_counter() - t0)
            conn.start_next_cycle()
    finally:
        writer.close()


def load(port: int, callers: int, seconds: float, body: bytes = BODY, host: str = HOST) -> dict[str, float]:
    """``callers`` keep-alive connections posting ``body`` back to back for ``seconds`` (after a 1 s warm-up)."""

    async def run() -> tuple[list[float], float]:
        warm: list[float] = []
        await asyncio.gather(*(_caller(port, time.monotonic() + 1.0, warm, body, host) for _ in range(callers)))
        latencies: list[float] = []
        t0 = time.monotonic()
        await asyncio.gather(*(_caller(port, t0 + seconds, latencies, body, host) for _ in range(callers)))
        return latencies, time.monotonic() - t0

    latencies, took = asyncio.run(run())
    latencies.sort()
    n = len(latencies)
    return {
        "requests": n,
        "seconds": round(took, 3),
        "throughput_rps": round(n / took, 2),
        "p50_ms": round(1000 * latencies[n // 2], 3),
        "p99_ms": round(1000 * latencies[min(n - 1, int(n * 0.99))], 3),
    }


def _gateway(port: int, calls: int, tmp: Path, name: str) -> list[str]:
    return [
        "agent.judges._gateway",
        "--judge",
        "bench",
        "--host",
        HOST,
        "--upstream",
        f"http://{HOST}:{port}",
        "--max-concurrent-calls",
        str(calls),
        "--timeout",
        "60",
        "--run-dir",
        str(tmp / name),
    ]


def gateway_vs_direct(latency: float, callers: int = 64, seconds: float = 10.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gwbench") as d:
        tmp = Path(d)
        (tmp / "gw").mkdir()
        with _process(["tests.harness.fixed_judge", "--latency", str(latency)], tmp, "judge") as judge:
            direct = load(judge, callers, seconds)
            with _process(_gateway(judge, callers, tmp, "gw"), tmp, "gateway") as gw:
                through = load(gw, callers, seconds)
            logged = sum(1 for _ in (tmp / "gw" / names.gateway_log("bench")).open())
    return {
        "latency_s": latency,
        "callers": callers,
        "direct": direct,
        "gateway": through,
        "p50_added_ms": round(through["p50_ms"] - direct["p50_ms"], 3),
        "throughput_ratio": round(through["throughput_rps"] / direct["throughput_rps"], 4),
        "gateway_lines": logged,
    }


def grade_many_rate(latency: float, calls: int, grades: int) -> dict[str, Any]:
    from agent.judges.client import JudgeClient
    from agent.judges.rubrics import resolve_rubric

    rubric = resolve_rubric("q", {"profile": "general-quality", "max_output_tokens": 16, "temperature": 0.0})
    items = [("What is the capital of France?", f"answer {i}") for i in range(grades)]
    with tempfile.TemporaryDirectory(prefix="gmbench") as d:
        tmp = Path(d)
        (tmp / "gw").mkdir()
        with (
            _process(["tests.harness.fixed_judge", "--latency", str(latency)], tmp, "judge") as judge,
            _process(_gateway(judge, calls, tmp, "gw"), tmp, "gateway") as gw,
            JudgeClient(f"http://{HOST}:{gw}", "fixed-judge", timeout=60, max_connections=calls) as client,
        ):
            client.grade_many(rubric, items[:calls])  # warm-up: connections open
            t0 = time.monotonic()
            done = client.grade_many(rubric, items)
            took = time.monotonic() - t0
    bound = calls / latency
    rate = len(done) / took
    return {
        "latency_s": latency,
        "max_concurrent_calls": calls,
        "grades": grades,
        "seconds": round(took, 3),
        "grades_per_s": round(rate, 2),
        "bound_per_s": round(bound, 2),
        "ratio": round(rate / bound, 4),
    }


def table(rows: dict[str, Any]) -> str:
    out = [
        f"{'judge latency':>14} {'callers':>8} {'direct p50':>11} {'gateway p50':>12} {'added':>8} "
        f"{'direct rps':>11} {'gateway rps':>12} {'ratio':>7}"
    ]
    for r in rows["gateway"]:
        out.append(
            f"{r['latency_s'] * 1000:>11.0f} ms {r['callers']:>8} {r['direct']['p50_ms']:>8.2f} ms "
            f"{r['gateway']['p50_ms']:>9.2f} ms {r['p50_added_ms']:>5.2f} ms {r['direct']['throughput_rps']:>11.1f} "
            f"{r['gateway']['throughput_rps']:>12.1f} {r['throughput_ratio']:>7.3f}"
        )
    out.append("")
    out.append(f"{'judge latency':>14} {'max calls':>10} {'grades':>7} {'grades/s':>9} {'bound/s':>8} {'ratio':>7}")
    for r in rows["grade_many"]:
        out.append(
            f"{r['latency_s'] * 1000:>11.0f} ms {r['max_concurrent_calls']:>10} {r['grades']:>7} "
            f"{r['grades_per_s']:>9.1f} {r['bound_per_s']:>8.1f} {r['ratio']:>7.3f}"
        )
    return "\n".join(out)


def run(latencies: list[float], seconds: float) -> dict[str, Any]:
    return {
        # One caller: what the gateway adds to a request's latency. 64 callers: to the throughput.
        "gateway": [gateway_vs_direct(lat, callers, seconds) for lat in latencies for callers in (1, 64)],
        # Enough rounds of max_concurrent_calls grades for >= 5 s (and >= 10 rounds) per measurement.
        "grade_many": [
            grade_many_rate(lat, calls, calls * max(10, math.ceil(5 / lat))) for lat in latencies for calls in (16, 64)
        ],
    }
