"""Failures: what tripped this agent, recorded once, seen by every thread (the record's writer is
agent/coord/failure_record.py: it needs the run directory)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.ground import clock
from schemas import FailureKind
from schemas.errors import EXIT_RUN_FAILED, GymError
from schemas.vocab import FsCondition

__all__ = ["AgentFailed", "Failure", "FailureSignal"]


@dataclass(frozen=True)
class Failure:
    """Why this replica is stopping. `reacting_to` names the peer failure it reacts to, if any."""

    kind: FailureKind
    cause: str
    phase: str = ""
    log: str | None = None
    reacting_to: dict[str, Any] | None = None
    peers: tuple[int, ...] = ()
    # The facts behind `cause`, as fields the audit reads (schemas/records/_failure.py says which is which).
    exit_code: int | None = None  # a child's or the driver's exit status (-N: killed by signal N)
    child: str | None = None  # which supervised child exited
    judge: str | None = None  # the judge concerned (a managed judge's exit or health, a degraded binding's)
    binding: str | None = None  # the verifier binding concerned (judge_degraded)
    signal: str | None = None  # the signal this agent received, by name
    sender: dict[str, Any] | None = None  # a signal's sender: {pid, uid, name} (agent.proc.signals)
    fs_condition: FsCondition | None = None  # the run directory refused our writes
    checks: tuple[str, ...] = ()  # a preflight failure: the checks that failed (agent/preflight/)
    hang: dict[str, Any] | None = None  # a hang's progress facts (agent/lifecycle/_progress_watch.py)
    # A reaction's (peer_failure) view of the failure it reacts to: that record's own cause, which
    # the doorbell rings on to the other peers (not written: `cause` quotes it).
    reacted_cause: str | None = None
    # Heard on the doorbell (not written): its sender already rang every peer, so this agent
    # does not ring it on (a failure wave of N agents would otherwise send N^2 datagrams).
    heard_on_doorbell: bool = False
    # Not written: this node stops for the scheduler's walltime warning while the driver is stuck
    # (its node calls that a hang): its processes' stacks are kept before the teardown too.
    keep_stacks: bool = False
    wall_time: float = field(default_factory=clock.wall)
    monotonic_time: float = field(default_factory=clock.mono)


class AgentFailed(GymError):
    """Raised inside a phase to stop the lifecycle; carries the failure (the run failed: exit 1)."""

    exit_code = EXIT_RUN_FAILED

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.cause)
        self.failure = failure


class FailureSignal:
    """The first failure wins; later ones are ignored (they are consequences)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._failure: Failure | None = None
        self._listeners: list[Callable[[], None]] = []

    def trip(self, failure: Failure) -> bool:
        with self._lock:
            if self._failure is not None:
                return False
            self._failure = failure
            listeners = list(self._listeners)
        # Listeners first (they start the record's writer), then the waiters: a thread woken by
        # the event finds what the listeners set up. is_set() is already true for both.
        for wake in listeners:
            wake()
        self._event.set()
        return True

    def on_trip(self, wake: Callable[[], None]) -> None:
        """Call `wake` (once, from the tripping thread, before `wait` returns anywhere) when the
        first failure arrives: a thread blocked on file descriptors (the supervisor) is woken by it
        instead of polling the flag; the failure record's writer starts from it at once."""
        with self._lock:
            tripped = self._failure is not None
            if not tripped:
                self._listeners.append(wake)
        if tripped:
            wake()

    @property
    def failure(self) -> Failure | None:
        return self._failure

    def is_set(self) -> bool:
        return self._failure is not None

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)

    def raise_if_set(self) -> None:
        if self._failure is not None:
            raise AgentFailed(self._failure)
