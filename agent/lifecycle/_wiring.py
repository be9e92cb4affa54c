"""The wiring of one agent's runtimes, before its first step: the reaper and the supervisor, the
node-local directory, the liveness thread, the run context, the judge, Ray, preflight and driver
runtimes, the hang's stacks and `gym-launch stacks`' listener, the doorbell armed. What it starts
is one `Running`, which every step and the teardown are given."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass

from agent.coord.context import RunContext
from agent.coord.identity import Identity
from agent.coord.liveness import Liveness
from agent.ground.failure import Failure, FailureSignal
from agent.ground.reaper_channel import ReaperChannel
from agent.judges.runtime import JudgeRuntime
from agent.lifecycle._doorbell_link import DoorbellLink
from agent.lifecycle._driver import DriverRuntime
from agent.lifecycle._hang_stacks import HangStacks
from agent.lifecycle._phase_log import PhaseLog
from agent.lifecycle._running import Running
from agent.lifecycle.init import Joined
from agent.preflight.runtime import PreflightRuntime
from agent.proc import signals, tempdirs
from agent.proc.procgroup import become_subreaper
from agent.proc.supervisor import Supervisor, child_env
from agent.ray.runtime import RayRuntime
from agent.stacks.live import LiveStacks
from schemas import FailureKind

__all__ = ["start"]


@dataclass(frozen=True)
class _Node:
    """This node's own processes and place: the reaper, its pipe, the supervisor, the local dir."""

    reaper: subprocess.Popen[str]
    channel: ReaperChannel
    supervisor: Supervisor
    local_dir: str


def start(joined: Joined, signal: FailureSignal, log: PhaseLog, bell: DoorbellLink, deadline: float) -> Running:
    """Start everything the steps run on; `deadline` is the single startup deadline."""
    node = _start_node(joined, signal, log)
    wake = threading.Event()  # a wait's early end: a peer's `complete` notice, or a failure
    signal.on_trip(wake.set)
    liveness = _liveness(joined, signal, log, wake)
    ctx = _context(joined, signal, log, node, deadline, wake, liveness, bell)
    # First thing when the children are stopped, before any grace: a hang's stacks.
    stacks = HangStacks(ctx)
    node.supervisor.before_stop(stacks.take)
    count = joined.ident.count
    judges = JudgeRuntime(ctx)
    ray = RayRuntime(ctx, count, joined.log_fd)
    preflight = PreflightRuntime(
        ctx,
        hostname=joined.ident.hostname,
        scheduler_node=_slurm_node(joined.ident),
        probe=bell.probe,
        probe_off=bell.probe_off,
    )
    driver = DriverRuntime(ctx, judges, ray, count)
    liveness.heartbeat_extra = driver.heartbeat_fields
    driver.before_hang = stacks.take_for  # the stacks first: no node tears down before them
    # gym-launch stacks, answered while the run goes (woken by the doorbell, or by its own listing).
    coord = joined.config.coordination
    live = LiveStacks(
        joined.run, joined.writer, joined.ident.rank, node.supervisor, signal, coord.stack_dump_timeout, node.local_dir
    )
    live.start()
    liveness.start()
    bell.arm(liveness, node.channel, live, beacon_every=coord.heartbeat_interval)
    return Running(ctx, node.reaper, liveness, judges, ray, driver, preflight, stacks, live)


def _start_node(joined: Joined, signal: FailureSignal, log: PhaseLog) -> _Node:
    become_subreaper()  # a driver's setsid grandchild stays ours when its parent exits
    _install_signal_handlers(signal, log)
    reaper = _start_reaper(joined)
    channel = ReaperChannel(reaper.stdin)
    grace = joined.config.coordination.teardown_grace
    supervisor = Supervisor(signal, grace, channel, log.phase_name, spare=(reaper.pid,), mark=joined.writer.incarnation)
    log.on_phase = channel.phase
    local_dir = tempdirs.make(tempdirs.DRIVER_PREFIX)  # node-local: progress board, fallback stack dumps
    channel.temp_dir(local_dir)  # removed by the reaper if we are SIGKILLed
    return _Node(reaper, channel, supervisor, local_dir)


def _install_signal_handlers(signal: FailureSignal, log: PhaseLog) -> None:
    def received(sig: signals.Received) -> None:
        signal.trip(Failure(kind=FailureKind.SIGNAL, cause=sig.describe(), phase=log.phase_name(), **sig.facts()))

    # SIGTERM/SIGINT with their sender (si_pid): a scheduler's reaction is told from a cause.
    signals.start(received)


def _start_reaper(joined: Joined) -> subprocess.Popen[str]:
    """The sidecar that records and cleans up after this agent if it is SIGKILLed (agent/reaper/)."""
    coord = joined.config.coordination
    argv = [
        sys.executable,
        "-m",
        "agent.reaper",
        "--run-dir",
        str(joined.run.path),
        "--rank",
        str(joined.ident.rank),
        "--incarnation",
        joined.writer.incarnation,
        "--fingerprint",
        joined.config.fingerprint,
        "--agent-pid",
        str(os.getpid()),
        "--grace",
        str(coord.teardown_grace),
        "--heartbeat-timeout",
        str(coord.heartbeat_timeout),
        "--poll",
        str(coord.poll_interval),
        "--agent-started",
        repr(joined.started_mono),
    ]
    with signals.unblocked():
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            text=True,
            start_new_session=True,
            stdout=joined.log_fd,
            stderr=joined.log_fd,
            close_fds=True,
            env=child_env({}),
        )


def _liveness(joined: Joined, signal: FailureSignal, log: PhaseLog, wake: threading.Event) -> Liveness:
    coord = joined.config.coordination
    return Liveness(
        joined.run,
        joined.writer,
        joined.ident.rank,
        joined.ident.count,
        heartbeat_interval=coord.heartbeat_interval,
        heartbeat_timeout=coord.heartbeat_timeout,
        poll_interval=coord.poll_interval,
        fs_stall_timeout=coord.fs_stall_timeout,
        beacon_timeout=coord.beacon_timeout if coord.doorbell else 0.0,
        signal=signal,
        phase=log.phase_name,
        completed=wake,
    )


def _context(
    joined: Joined,
    signal: FailureSignal,
    log: PhaseLog,
    node: _Node,
    deadline: float,
    wake: threading.Event,
    liveness: Liveness,
    bell: DoorbellLink,
) -> RunContext:
    ident = joined.ident
    return RunContext(
        signal=signal,
        deadline=deadline,
        wake=wake,
        config=joined.config,
        plan=joined.plan,
        rank=ident.rank,
        address=ident.address,
        visible_devices=tuple(ident.visible_devices),
        run=joined.run,
        writer=joined.writer,
        filesystem=joined.filesystem,
        out=joined.out,
        supervisor=node.supervisor,
        reaper=node.channel,
        local_dir=node.local_dir,
        phase=log.phase_name,
        doorbell_carries=liveness.doorbell_carries,
        notify_complete=bell.complete,
    )


def _slurm_node(ident: Identity) -> str | None:
    """Slurm's name for this node (what `--exclude` takes), when a Slurm job runs us."""
    job = ident.scheduler_job
    return job.node if job is not None and job.scheduler == "slurm" else None
