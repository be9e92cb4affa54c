"""Failures: what tripped this agent, recorded once, seen by every thread."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from . import clock


@dataclass(frozen=True)
class Failure:
    """Why this replica is stopping. `reacting_to` names the peer failure it reacts to, if any."""

    kind: str
    cause: str
    phase: str = ""
    log: str | None = None
    reacting_to: dict[str, Any] | None = None
    peers: tuple[int, ...] = ()
    wall_time: float = field(default_factory=clock.wall)
    monotonic_time: float = field(default_factory=clock.mono)


class AgentFailed(Exception):
    """Raised inside a phase to stop the lifecycle; carries the failure."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.cause)
        self.failure = failure


class FailureSignal:
    """The first failure wins; later ones are ignored (they are consequences)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._failure: Failure | None = None

    def trip(self, failure: Failure) -> bool:
        with self._lock:
            if self._failure is not None:
                return False
            self._failure = failure
        self._event.set()
        return True

    @property
    def failure(self) -> Failure | None:
        return self._failure

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)

    def raise_if_set(self) -> None:
        if self._failure is not None:
            raise AgentFailed(self._failure)
