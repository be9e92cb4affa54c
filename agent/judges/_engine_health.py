"""Health of HTTP inference engines (judges, rollout engines): probes, quarantine, epochs.

Rules (docs/runtime-notes.md, "Judges"):
- probes use their own httpx connection pool, never the generation/grading pool, so a
  saturated generation pool cannot starve them;
- ``failure_threshold`` consecutive failures (default 3) quarantine an engine and fire
  ``on_quarantine`` once;
- quarantine is sticky: a later successful probe does not lift it (HTTP recovery cannot prove
  the engine holds current policy weights); only :meth:`EngineHealthRegistry.register` does;
- every registration gets a new epoch; a probe result carries the epoch it was started under
  and is discarded if the engine was re-registered or retired meanwhile;
- 503 is retryable (a loading server): it is retried within the probe, and while an engine
  has never been healthy it does not count as a failure at all;
- failure log lines name the exception class.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from enum import StrEnum

import httpx

__all__ = [
    "EngineHealthRegistry",
    "EngineState",
    "EngineStatus",
    "ProbeResult",
    "QuarantineCallback",
    "RegistryStats",
    "UnhealthyStatus",
    "UnknownEngine",
    "agent_registry",
    "health_check_cause",
    "log",
    "quarantine_cause",
]

log = logging.getLogger("gym.engine_health")


class EngineState(StrEnum):
    STARTING = "starting"  # registered, never answered healthy yet
    HEALTHY = "healthy"
    QUARANTINED = "quarantined"


class UnhealthyStatus(Exception):
    """The health endpoint answered with a non-200 status."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


class UnknownEngine(KeyError):
    """No engine is registered under that id."""


@dataclass(frozen=True)
class EngineStatus:
    engine_id: str
    base_url: str
    epoch: int
    state: EngineState
    consecutive_failures: int = 0
    probes: int = 0
    failures: int = 0
    last_error: str | None = None
    last_ok_monotonic: float | None = None
    quarantine_reason: str | None = None
    health_path: str | None = None  # this engine's own health check path (None: the registry's)


@dataclass(frozen=True)
class ProbeResult:
    engine_id: str
    epoch: int
    ok: bool
    error: str | None = None  # "ExceptionClass: message"
    retryable: bool = False  # only 503-class answers: the server is up but not serving yet
    latency_s: float = 0.0


@dataclass(frozen=True)
class RegistryStats:
    probes: int = 0
    failures: int = 0
    stale_results: int = 0  # results discarded because the epoch changed mid-probe
    quarantines: int = 0
    cancelled: int = 0  # probes whose result arrived after stop() began


QuarantineCallback = Callable[[EngineStatus], None]


class EngineHealthRegistry:
    """Tracks engines by id; probe with :meth:`probe_once` or the background loop (:meth:`start`)."""

    def __init__(
        self,
        *,
        failure_threshold: int = 3,
        probe_timeout: float = 5.0,
        interval: float = 10.0,
        health_path: str = "/health",
        retries_on_503: int = 2,
        retry_delay: float = 0.25,
        max_connections: int = 16,
        on_quarantine: QuarantineCallback | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError("failure_threshold must be >= 1")
        self.failure_threshold = failure_threshold
        self.probe_timeout = probe_timeout
        self.interval = interval
        self.health_path = health_path
        self.retries_on_503 = retries_on_503
        self.retry_delay = retry_delay
        self._on_quarantine = on_quarantine
        # The probe pool: separate from every generation client by construction (this registry
        # never accepts one), so saturating generation traffic cannot block a probe.
        self._http = httpx.Client(
            timeout=httpx.Timeout(probe_timeout),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            transport=transport,
        )
        self._workers = ThreadPoolExecutor(max_workers=max_connections, thread_name_prefix="health-probe")
        self._lock = threading.Lock()
        self._engines: dict[str, EngineStatus] = {}
        self._next_epoch = 1
        self._stats = RegistryStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- registration --

    def register(self, engine_id: str, base_url: str, health_path: str | None = None) -> int:
        """(Re-)register an engine, probed on ``health_path`` (None: the registry's); returns its new
        epoch. Clears quarantine and counters."""
        with self._lock:
            epoch = self._next_epoch
            self._next_epoch += 1
            self._engines[engine_id] = EngineStatus(
                engine_id, base_url.rstrip("/"), epoch, EngineState.STARTING, health_path=health_path
            )
        log.info("engine registered engine=%s epoch=%d url=%s", engine_id, epoch, base_url)
        return epoch

    def retire(self, engine_id: str) -> None:
        """Forget an engine; probes already in flight for it are discarded as stale."""
        with self._lock:
            self._engines.pop(engine_id, None)

    # -- queries --

    def status(self, engine_id: str) -> EngineStatus:
        with self._lock:
            try:
                return self._engines[engine_id]
            except KeyError:
                raise UnknownEngine(engine_id) from None

    def statuses(self) -> dict[str, EngineStatus]:
        with self._lock:
            return dict(self._engines)

    def is_quarantined(self, engine_id: str) -> bool:
        return self.status(engine_id).state is EngineState.QUARANTINED

    def healthy(self) -> list[str]:
        with self._lock:
            return sorted(e for e, s in self._engines.items() if s.state is EngineState.HEALTHY)

    @property
    def stats(self) -> RegistryStats:
        with self._lock:
            return self._stats

    # -- probing --

    def probe(self, engine_id: str, epoch: int, base_url: str, path: str | None = None) -> ProbeResult:
        """One non-generating health check of ``path`` (None: the registry's; 503 retried inside): any
        2xx answer is healthy. Does not change any state."""
        started = time.monotonic()
        attempt = 0
        while True:
            try:
                response = self._http.get(base_url + (path or self.health_path))
                if 200 <= response.status_code < 300:
                    return ProbeResult(engine_id, epoch, True, latency_s=time.monotonic() - started)
                raise UnhealthyStatus(response.status_code)
            except (httpx.HTTPError, UnhealthyStatus) as exc:
                retryable = isinstance(exc, UnhealthyStatus) and exc.status == 503
                if retryable and attempt < self.retries_on_503 and not self._stop.is_set():
                    attempt += 1
                    time.sleep(self.retry_delay)
                    continue
                return ProbeResult(
                    engine_id,
                    epoch,
                    False,
                    error=f"{type(exc).__name__}: {exc}",
                    retryable=retryable,
                    latency_s=time.monotonic() - started,
                )

    def record(self, result: ProbeResult) -> bool:
        """Apply a probe result; False if it belongs to a retired incarnation (stale epoch)."""
        quarantined: EngineStatus | None = None
        with self._lock:
            current = self._engines.get(result.engine_id)
            if current is None or current.epoch != result.epoch:
                self._stats = replace(self._stats, stale_results=self._stats.stale_results + 1)
                log.info(
                    "discarding stale probe result engine=%s epoch=%d (current epoch %s)",
                    result.engine_id,
                    result.epoch,
                    current.epoch if current else "none",
                )
                return False
            if self._stop.is_set():
                self._stats = replace(self._stats, cancelled=self._stats.cancelled + 1)
                return False
            self._stats = replace(self._stats, probes=self._stats.probes + 1)
            updated = replace(current, probes=current.probes + 1)
            if result.ok:
                updated = replace(updated, consecutive_failures=0, last_ok_monotonic=time.monotonic())
                if updated.state is EngineState.STARTING:
                    updated = replace(updated, state=EngineState.HEALTHY)
                # A quarantined engine stays quarantined: only register() lifts it.
            elif result.retryable and current.state is EngineState.STARTING:
                updated = replace(updated, last_error=result.error)  # still loading: not a failure
            else:
                failures = current.consecutive_failures + 1
                self._stats = replace(self._stats, failures=self._stats.failures + 1)
                updated = replace(
                    updated,
                    consecutive_failures=failures,
                    failures=current.failures + 1,
                    last_error=result.error,
                )
                log.warning(
                    "health probe failed engine=%s epoch=%d url=%s error=%s consecutive=%d/%d",
                    current.engine_id,
                    current.epoch,
                    current.base_url,
                    result.error,
                    failures,
                    self.failure_threshold,
                )
                if failures >= self.failure_threshold and current.state is not EngineState.QUARANTINED:
                    reason = f"{failures} consecutive health failures, last: {result.error}"
                    updated = replace(updated, state=EngineState.QUARANTINED, quarantine_reason=reason)
                    self._stats = replace(self._stats, quarantines=self._stats.quarantines + 1)
                    quarantined = updated
            self._engines[result.engine_id] = updated
        if quarantined is not None:
            log.error(
                "engine quarantined engine=%s epoch=%d: %s",
                quarantined.engine_id,
                quarantined.epoch,
                quarantined.quarantine_reason,
            )
            if self._on_quarantine is not None:
                self._on_quarantine(quarantined)  # outside the lock: callbacks may query the registry
        return True

    def probe_once(self, engine_ids: Iterable[str] | None = None) -> dict[str, ProbeResult]:
        """Probe every (or the given) engine concurrently and apply the results."""
        wanted = None if engine_ids is None else set(engine_ids)
        with self._lock:
            targets = [
                (s.engine_id, s.epoch, s.base_url, s.health_path)
                for s in self._engines.values()
                if wanted is None or s.engine_id in wanted
            ]
        futures = [self._workers.submit(self.probe, *target) for target in targets]
        results: dict[str, ProbeResult] = {}
        for future in futures:
            result = future.result()
            self.record(result)
            results[result.engine_id] = result
        return results

    def wait_healthy(self, engine_id: str, deadline_monotonic: float, poll: float = 0.5) -> EngineStatus:
        """Probe until the engine is healthy; raises TimeoutError at the deadline, or
        RuntimeError if it is quarantined first."""
        while True:
            self.probe_once([engine_id])
            status = self.status(engine_id)
            if status.state is EngineState.HEALTHY:
                return status
            if status.state is EngineState.QUARANTINED:
                raise RuntimeError(f"engine {engine_id} quarantined while starting: {status.quarantine_reason}")
            remaining = deadline_monotonic - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"engine {engine_id} not healthy before the deadline (last: {status.last_error})")
            time.sleep(min(poll, remaining))

    # -- background loop --

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("probe loop already started")
        self._thread = threading.Thread(target=self._loop, name="engine-health", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.probe_once()
            except Exception:  # a bug in a callback must not silently end health checking
                log.exception("health probe round failed")
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def stop(self, timeout: float | None = None) -> None:
        """Stop the loop and join it; results arriving afterwards are counted as cancelled."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout if timeout is not None else self.probe_timeout * 2 + self.interval)
        self._workers.shutdown(wait=False, cancel_futures=True)
        self._http.close()

    def __enter__(self) -> EngineHealthRegistry:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def agent_registry(interval: float, failures: int, on_quarantine: QuarantineCallback) -> EngineHealthRegistry:
    """The registry an agent probes its engines with (judges, the policy): at the heartbeat's rate,
    each probe bounded by twice it (1 to 5 s)."""
    return EngineHealthRegistry(
        failure_threshold=failures,
        interval=interval,
        probe_timeout=max(1.0, min(5.0, 2 * interval)),
        on_quarantine=on_quarantine,
    )


def health_check_cause(what: str, url: str, where: str, got: str | None, waited: float, bound: str) -> str:
    """The failure's cause when ``what``'s health check (GET ``url``) never passed before its bound."""
    return (
        f"{what}'s health check (GET {url}) on {where} never passed: it got {got or 'no answer'} "
        f"for {waited:.0f} s ({bound})"
    )


def quarantine_cause(what: str, status: EngineStatus, failures: int) -> str:
    """The failure's cause when ``what`` (an engine) is quarantined."""
    path = status.health_path or "/health"
    return f"{what} failed {failures} consecutive {path} probes (last: {status.last_error or 'no answer'})"
