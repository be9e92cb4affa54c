"""What the parts of one agent share: the run context, fixed at start (the topology, known after
plan agreement, is in topology.py). The judge, Ray and driver runtimes and the lifecycle steps see
only these, never the Agent object itself."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.ground import clock
from agent.ground.failure import AgentFailed, Failure, FailureSignal
from agent.ground.reaper_channel import ReaperChannel
from agent.ground.waits import Progress, poll_until
from agent.proc.supervisor import Supervisor
from launch.spec.config import RunConfig
from launch.spec.plan import Plan
from launch.spec.resolve import Service
from launch.spec.service_process import ServiceProcess, ServiceProcessError, service_process
from schemas import FailureKind, RunDir, Writer

__all__ = ["RunContext"]


@dataclass(frozen=True)
class RunContext:
    config: RunConfig
    plan: Plan
    rank: int
    address: str
    visible_devices: tuple[str, ...]
    run: RunDir
    writer: Writer
    signal: FailureSignal
    supervisor: Supervisor
    reaper: ReaperChannel
    phase: Callable[[], str]  # the phase the agent is in now
    deadline: float  # the single startup deadline, monotonic
    out: Callable[[str], None] = lambda _line: None  # the agent's console (and log) line printer
    filesystem: Mapping[str, Any] | None = None  # the output root's mount, for the placement record (fs_guard)
    # Set by a peer's `complete` notice on the doorbell, and by a failure: ends a wait's sleep early.
    wake: threading.Event = field(default_factory=threading.Event)
    # Peers' doorbell beacons arrive: the files are only the backstop, polled once per heartbeat.
    doorbell_carries: Callable[[], bool] = lambda: False
    notify_complete: Callable[[], None] = lambda: None  # the driver's node: tell peers its ack is there
    # Node-local (agent/proc/driver_local.py): the driver's progress board, processes' fallback stack dumps.
    local_dir: str | None = None

    def service_process(self, key: str, svc: Service, argv: Sequence[str], devices: str | None) -> ServiceProcess:
        """Service ``key``'s argv and added environment from its own keys (env, pre_command, container;
        seed 001), as launch.spec.service_process builds them from this agent's environment; a key it
        cannot honour here fails the run (``environment``), naming it."""
        try:
            return service_process(key, svc, argv, os.environ, devices=devices)
        except ServiceProcessError as exc:
            raise self.fail(FailureKind.ENVIRONMENT, str(exc)) from None

    def progress(self, describe: Callable[[float], str]) -> Progress:
        """Progress lines for a long wait, at the spec's calm rate (coordination.progress_interval)."""
        return Progress(describe, self.out, self.config.coordination.progress_interval)

    def fail(self, kind: FailureKind, cause: str, **kw: object) -> AgentFailed:
        return AgentFailed(Failure(kind=kind, cause=cause, phase=self.phase(), **kw))  # type: ignore[arg-type]

    def refused(self, exc: OSError, relpath: str) -> AgentFailed:
        """A write the run directory refused (full, over quota, read-only): the run's failure names
        the filesystem and the file, as the heartbeat's own failing writes do; never an internal error."""
        from agent.coord.durable import describe, fs_condition  # the cold path: loaded when it happens

        cause = f"{describe(exc)} (writing {relpath}; free space on, or fix, the run directory's filesystem)"
        return self.fail(FailureKind.RUN_DIR, cause, fs_condition=fs_condition(exc))

    def listed(self, name: str, subdir: str = "") -> bool:
        """Is `name` in the run directory (or `subdir`)? By listing: NFS caches negative lookups."""
        return name in self.run.listdir(subdir)

    def wait_startup(
        self, what: str, predicate: Callable[[], bool], describe: Callable[[float], str] | None = None
    ) -> None:
        """Wait inside the single startup deadline; past it the run fails as startup_timeout."""
        poll = self.config.coordination.poll_interval
        progress = self.progress(describe or (lambda left: f"waiting for {what}; {left:.0f} s left"))
        if not poll_until(predicate, deadline=self.deadline, interval=poll, signal=self.signal, progress=progress):
            raise self.fail(
                FailureKind.STARTUP_TIMEOUT,
                f"{what} not reached within startup_timeout "
                f"{self.config.coordination.startup_timeout:g}s (counted from agent start)",
            )

    def wait_bounded(self, what: str, predicate: Callable[[], bool], *, kind: FailureKind, timeout: float) -> None:
        """Wait with a timeout of its own; past it the run fails with `kind`, which names what
        was waited for (ack_timeout: the acknowledgements)."""
        poll = self.config.coordination.poll_interval
        deadline = clock.mono() + timeout
        progress = self.progress(lambda left: f"waiting for {what}; {left:.0f} s left")
        if not poll_until(predicate, deadline=deadline, interval=poll, signal=self.signal, progress=progress):
            raise self.fail(kind, f"{what} not reached within {timeout:g}s")

    def wait_unbounded(self, predicate: Callable[[], bool], *, files: bool = False) -> None:
        """Wait until `predicate` or a failure (the driver runs as long as it needs). A wait on
        the run directory (`files`) polls once per heartbeat interval while the doorbell carries
        (its `complete` notice wakes it), else every poll interval."""
        coord = self.config.coordination

        def interval() -> float:  # re-decided every round: a peer's beacons may stop
            return coord.heartbeat_interval if files and self.doorbell_carries() else coord.poll_interval

        poll_until(predicate, deadline=float("inf"), interval=interval, signal=self.signal, wake=self.wake)
