"""Engine health with real HTTP servers: pool independence under saturation, sticky quarantine,
stale epochs, 503 handling, exception classes in logs, joined shutdown."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import psutil
import pytest
from _judge_server import RunningServer, dead_port

from agent.judges._engine_health import EngineHealthRegistry, EngineState, EngineStatus, ProbeResult

Factory = Callable[..., RunningServer]


# ---- a small in-process server whose /health the test controls ------------------------------


@dataclass
class Control:
    status: int = 200
    statuses: list[int] = field(default_factory=list)  # served first, one per request
    gate: threading.Event | None = None  # when set, /health waits for it before answering
    hits: int = 0


class ControlledServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, control: Control) -> None:
        self.control = control
        super().__init__(("127.0.0.1", 0), ControlledHandler)


class ControlledHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ControlledServer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        control = self.server.control
        control.hits += 1
        if control.gate is not None:
            control.gate.wait(10)
        status = control.statuses.pop(0) if control.statuses else control.status
        body = b"{}"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def controlled() -> Iterator[tuple[Control, str]]:
    control = Control()
    server = ControlledServer(control)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield control, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        if control.gate is not None:
            control.gate.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def established(server: RunningServer) -> int:
    connections = psutil.Process(server.proc.pid).net_connections(kind="tcp")
    return sum(1 for c in connections if c.status == psutil.CONN_ESTABLISHED)


def fast_registry(**options: object) -> EngineHealthRegistry:
    options.setdefault("probe_timeout", 3.0)
    options.setdefault("retry_delay", 0.05)
    return EngineHealthRegistry(**options)  # type: ignore[arg-type]


# ---- tests -----------------------------------------------------------------------------------


def test_probes_reach_a_healthy_engine_while_the_generation_pool_is_saturated(judge_server: Factory) -> None:
    server = judge_server("--fault", "slow", "6")
    body = {
        "model": server.model,
        "messages": [
            {
                "role": "user",
                "content": "<question>\nq\n</question>\n\n<candidate_answer>\na\n</candidate_answer>",
            }
        ],
        "max_tokens": 64,
    }
    generation = httpx.Client(
        base_url=server.base_url,
        limits=httpx.Limits(max_connections=2, max_keepalive_connections=2),
        timeout=httpx.Timeout(10, pool=0.3),
    )
    statuses: list[int] = []
    in_flight = [
        threading.Thread(target=lambda: statuses.append(generation.post("/v1/chat/completions", json=body).status_code))
        for _ in range(2)
    ]
    with fast_registry() as registry:
        epoch = registry.register("engine-0", server.base_url)
        for thread in in_flight:
            thread.start()
        # Wait until both slow requests hold the generation pool's two connections (seen from the
        # server's side), so the checks below run while the pool is really saturated.
        deadline = time.monotonic() + 10
        while established(server) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert established(server) >= 2
        # Control: the generation pool itself cannot reach the engine now...
        with pytest.raises(httpx.PoolTimeout):
            generation.get("/health")
        # ...but the registry's own pool can, promptly.
        started = time.monotonic()
        result = registry.probe_once()["engine-0"]
        assert result.ok and result.epoch == epoch
        assert time.monotonic() - started < 4.0  # far below the 6 s the generation requests take
        assert registry.status("engine-0").state is EngineState.HEALTHY
        assert all(thread.is_alive() for thread in in_flight)  # still saturated while probed
        for thread in in_flight:
            thread.join(15)
    generation.close()
    assert statuses == [200, 200]


def test_three_failures_quarantine_once_and_log_the_exception_class(
    judge_server: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    server = judge_server("--fault", "hang-health-after", "0")
    quarantined: list[EngineStatus] = []
    caplog.set_level(logging.WARNING, logger="gym.engine_health")
    with fast_registry(probe_timeout=0.3, on_quarantine=quarantined.append) as registry:
        registry.register("judge-general", server.base_url)
        for expected in (1, 2):
            assert not registry.probe_once()["judge-general"].ok
            assert registry.status("judge-general").consecutive_failures == expected
            assert quarantined == []
        registry.probe_once()
        registry.probe_once()  # a fourth failure does not fire the callback again
        status = registry.status("judge-general")
    assert status.state is EngineState.QUARANTINED
    assert [q.engine_id for q in quarantined] == ["judge-general"]
    assert "ReadTimeout" in (quarantined[0].quarantine_reason or "")
    failures = [r.getMessage() for r in caplog.records if "health probe failed" in r.getMessage()]
    assert len(failures) == 4 and all("error=ReadTimeout" in line for line in failures)


def test_connection_refused_is_logged_by_class(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gym.engine_health")
    with fast_registry() as registry:
        registry.register("gone", f"http://127.0.0.1:{dead_port()}")
        assert registry.probe_once()["gone"].error.startswith("ConnectError")  # type: ignore[union-attr]
    assert any("error=ConnectError" in r.getMessage() for r in caplog.records)


def test_quarantine_is_sticky_until_re_registration(controlled: tuple[Control, str]) -> None:
    control, url = controlled
    with fast_registry() as registry:
        first = registry.register("engine-1", url)
        registry.probe_once()
        assert registry.status("engine-1").state is EngineState.HEALTHY
        control.status = 500
        for _ in range(3):
            registry.probe_once()
        assert registry.is_quarantined("engine-1")
        control.status = 200  # HTTP recovery alone proves nothing about the engine's weights
        for _ in range(3):
            assert registry.probe_once()["engine-1"].ok
        assert registry.is_quarantined("engine-1")
        assert registry.healthy() == []
        second = registry.register("engine-1", url)  # explicit re-registration
        assert second > first
        assert registry.status("engine-1").state is EngineState.STARTING
        registry.probe_once()
        assert registry.healthy() == ["engine-1"]


def test_late_result_from_a_retired_incarnation_is_discarded(controlled: tuple[Control, str]) -> None:
    control, url = controlled
    control.gate = threading.Event()
    control.status = 500
    with fast_registry(probe_timeout=5.0) as registry:
        old = registry.register("engine-2", url)
        probing = threading.Thread(target=registry.probe_once)
        probing.start()
        deadline = time.monotonic() + 5
        while control.hits == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        new = registry.register("engine-2", url)  # the engine was replaced while the probe ran
        control.gate.set()
        probing.join(5)
        status = registry.status("engine-2")
        assert (status.epoch, status.probes, status.consecutive_failures) == (new, 0, 0)
        assert registry.stats.stale_results == 1
        assert registry.record(ProbeResult("engine-2", old, False, "ReadTimeout: late")) is False
        registry.retire("engine-2")
        assert registry.record(ProbeResult("engine-2", new, False, "ReadTimeout: late")) is False
        assert registry.stats.stale_results == 3


def test_503_is_retryable(controlled: tuple[Control, str]) -> None:
    control, url = controlled
    with fast_registry(retries_on_503=2) as registry:
        registry.register("engine-3", url)
        control.status = 503  # loading: never counts while the engine has not been healthy
        for _ in range(5):
            registry.probe_once()
        status = registry.status("engine-3")
        assert (status.state, status.consecutive_failures) == (EngineState.STARTING, 0)
        control.status = 200
        registry.probe_once()
        assert registry.status("engine-3").state is EngineState.HEALTHY
        control.statuses = [503, 503]  # a transient 503 burst is absorbed inside one probe
        assert registry.probe_once()["engine-3"].ok
        control.status = 503  # a persistent 503 on a serving engine is a failure
        result = registry.probe_once()["engine-3"]
        assert not result.ok and result.retryable and result.error == "UnhealthyStatus: HTTP 503"
        assert registry.status("engine-3").consecutive_failures == 1


def test_background_loop_probes_and_joins_on_stop(controlled: tuple[Control, str]) -> None:
    _control, url = controlled
    registry = fast_registry(interval=0.05)
    registry.register("engine-4", url)
    registry.start()
    deadline = time.monotonic() + 5
    while registry.status("engine-4").probes < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    registry.stop()
    assert registry.status("engine-4").probes >= 3
    assert registry._thread is not None and not registry._thread.is_alive()


def test_a_result_arriving_after_stop_began_is_counted_as_cancelled(controlled: tuple[Control, str]) -> None:
    control, url = controlled
    control.gate = threading.Event()  # the probe's answer waits until the stop has begun
    registry = fast_registry(interval=0.05, probe_timeout=5.0)
    registry.register("engine-5", url)
    registry.start()
    deadline = time.monotonic() + 5
    while control.hits == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert control.hits == 1
    stopping = threading.Thread(target=registry.stop)
    stopping.start()
    while not registry._stop.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)
    control.gate.set()  # the engine answers healthy, but too late: the registry is stopping
    stopping.join(15)
    assert not stopping.is_alive()
    assert registry.stats.cancelled == 1 and registry.stats.probes == 0
    status = registry.status("engine-5")
    assert (status.state, status.probes) == (EngineState.STARTING, 0)  # the late answer changed nothing
