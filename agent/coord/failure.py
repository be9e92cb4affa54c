"""Failures: what tripped this agent, recorded once, seen by every thread, written in one place."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.coord import clock
from agent.coord.durable import RecordKeeper, held_by_another_incarnation
from schemas import FailureKind, RunDir, Writer, names, records
from schemas.safe_io import Sync
from schemas.vocab import FsCondition


@dataclass(frozen=True)
class Failure:
    """Why this replica is stopping. `reacting_to` names the peer failure it reacts to, if any."""

    kind: FailureKind
    cause: str
    phase: str = ""
    log: str | None = None
    reacting_to: dict[str, Any] | None = None
    peers: tuple[int, ...] = ()
    # The facts behind `cause`, as fields the audit reads (schemas/records.py says which is which).
    exit_code: int | None = None  # a child's or the driver's exit status (-N: killed by signal N)
    child: str | None = None  # which supervised child exited
    judge: str | None = None  # the judge concerned (a managed judge's exit or health, a degraded binding's)
    binding: str | None = None  # the verifier binding concerned (judge_degraded)
    signal: str | None = None  # the signal this agent received, by name
    sender: dict[str, Any] | None = None  # a signal's sender: {pid, uid, name} (agent.proc.signals)
    fs_condition: FsCondition | None = None  # the run directory refused our writes
    checks: tuple[str, ...] = ()  # a preflight failure: the checks that failed (agent/preflight/)
    hang: dict[str, Any] | None = None  # a hang's progress facts (agent/lifecycle/progress_watch.py)
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


def write_failure_record(
    run: RunDir,
    writer: Writer,
    rank: int,
    failure: Failure,
    phase: str,
    keeper: RecordKeeper | None = None,
    *,
    started_mono: float | None = None,
) -> bool:
    """Write failure-RANK.json (the agent's own, or the reaper's for a killed agent).

    A hung or broken shared filesystem (OSError) is survivable: peers still see our silence, and
    with a `keeper` the record is kept on this node and retried (agent/coord/durable.py).
    A record that does not match its schema is an agent bug, and must not cost the evidence:
    it is reported on stderr and replaced by an `internal` record that quotes it."""
    fields = records.failure_fields(
        kind=failure.kind,
        cause=failure.cause,
        phase=failure.phase or phase,
        wall_time=failure.wall_time,
        monotonic_time=failure.monotonic_time,
        log=failure.log,
        reacting_to=failure.reacting_to,
        peers=failure.peers,
        sender=failure.sender,
        exit_code=failure.exit_code,
        child=failure.child,
        judge=failure.judge,
        binding=failure.binding,
        signal=failure.signal,
        fs_condition=failure.fs_condition,
        checks=failure.checks,
        hang=failure.hang,
        # The agent's start on the same host's monotonic clock (the reaper is told it).
        since_start=max(0.0, failure.monotonic_time - started_mono) if started_mono is not None else None,
    )
    if held_by_another_incarnation(run, names.failure(rank), writer.incarnation):
        print(f"gym-agent: [rank {rank}] not overwriting another incarnation's failure record", file=sys.stderr)
        return False
    try:
        # Visible first, durable before we return: peers are waiting for this one.
        run.write_artifact(names.failure(rank), writer, fields, sync=Sync.AFTER_RENAME)
        return True
    except OSError:
        return keeper.write(names.failure(rank), writer, fields) if keeper is not None else False
    except ValueError as exc:
        print(f"gym-agent: [rank {rank}] failure record rejected by its schema: {exc}", file=sys.stderr, flush=True)
        # Only the fields that cannot be wrong: a bad fact must not sink its own report.
        fallback = records.failure_fields(
            kind=FailureKind.INTERNAL,
            cause=f"the failure record did not match its schema ({exc}); it said: "
            f"{fields['kind']!r}: {fields['cause']!r}",
            phase=str(fields["phase"]),
            wall_time=failure.wall_time,
            monotonic_time=failure.monotonic_time,
            log=names.agent_log(rank),
            reacting_to=None,
        )
        try:
            run.write_artifact(names.failure(rank), writer, fallback)
            return True
        except OSError:
            return False
