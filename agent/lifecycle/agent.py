"""One replica's lifecycle: two tables of steps run in order, under an enforced overall state.

    INIT -> STARTING (STARTUP_STEPS) -> RUNNING (RUN_STEPS) -> STOPPING -> SUCCEEDED
    any failure, from INIT, STARTING or RUNNING:               STOPPING -> FAILED

The tables are data (steps.py: each step's phase, the nodes it applies to, the name of the method
that runs it: the Agent's before plan agreement, NodeSteps' (node_steps.py) once the topology
exists); the state is the state machine's (state.py), observed by the phase log (phase_log.py).
Ray, the driver and the judges are runtimes of their own on the run context.
Any failure (a child exits, the driver fails, SIGTERM/SIGINT, a peer's failure record, a silent
peer, the single startup deadline) writes this replica's failure record, stops every local
process group and writes its cleanup record; the agent then exits non-zero.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from agent.coord.context import RunContext
from agent.coord.doorbell import Doorbell
from agent.coord.doorbell_msg import PeerBell
from agent.coord.doorbell_probe import Probed
from agent.coord.doorbell_secret import SecretUnavailable, ensure_secret
from agent.coord.durable import RecordKeeper, local_dir
from agent.coord.failure_record import write_failure_record
from agent.coord.identity import Identity
from agent.coord.liveness import Liveness, watched_peers, watchers_of
from agent.coord.rendezvous import Peer, agree, gather, node_order
from agent.coord.topology import Topology
from agent.ground import clock
from agent.ground.failure import AgentFailed, Failure, FailureSignal
from agent.ground.reaper_channel import ReaperChannel
from agent.judges.runtime import JudgeRuntime
from agent.lifecycle.driver import DriverRuntime
from agent.lifecycle.hang_stacks import HangStacks, walltime_failure
from agent.lifecycle.node_steps import NodeSteps, Running
from agent.lifecycle.phase_log import PhaseLog
from agent.lifecycle.state import StateMachine
from agent.lifecycle.steps import AGREEMENT_STEPS, PLACED_STEPS, RUN_STEPS, TEARDOWN, Step, applies
from agent.preflight.runtime import PreflightRuntime
from agent.proc import signals, tempdirs
from agent.proc.cpu_priority import lower_priority
from agent.proc.procgroup import become_subreaper, escaped_descendants, session_members
from agent.proc.supervisor import Supervisor, child_env
from agent.ray import node as ray_node
from agent.ray.runtime import RayRuntime
from agent.stacks.live import LiveStacks
from launch.spec.config import RunConfig
from launch.spec.plan import Plan
from schemas import (
    AgentState,
    FailureKind,
    JobEnv,
    PhaseOutcome,
    RunDir,
    RunDirError,
    RunOutcome,
    Writer,
    names,
)
from schemas.vocab import PHASE_INIT

__all__ = ["Agent", "RunResult"]

log = logging.getLogger(__name__)

RECORD_RETRY_S = 20.0  # how long refused records are retried (space may come back) before exit
FAILURE_WRITE_BUDGET_S = 5.0  # a hung shared filesystem must not stop us from killing children
LIVENESS_JOIN_S = 2.0  # bounded: a hung shared filesystem may hold its last heartbeat write
RECORD_FIRST_S = 1.0  # how long the rest of a failed teardown waits for the failure record first
TEE_DRAIN_S = 2.0


@dataclass(frozen=True)
class RunResult:
    """All-or-nothing outcome of one agent: it succeeded, or it failed with one recorded cause."""

    state: AgentState
    failure: Failure | None
    exit_code: int


class Agent:
    def __init__(
        self,
        config: RunConfig,
        plan: Plan,
        ident: Identity,
        run: RunDir,
        *,
        incarnation: str,
        started_mono: float,
        out: Callable[[str], None],
        filesystem: Mapping[str, Any] | None = None,
        doorbell: tuple[Doorbell | None, str] = (None, ""),
    ) -> None:
        self.config = config
        self.plan = plan
        self.ident = ident
        self.run = run
        self.rank = ident.rank
        self.coord = config.coordination
        self.writer = Writer(config.fingerprint, ident.rank, incarnation, clock_offset=clock.skew())
        self.signal = FailureSignal()
        self.states = StateMachine()
        self.log = PhaseLog(run, self.writer, ident.rank, out, self.states)
        self.out = out
        self.started_mono = started_mono
        self.filesystem = filesystem
        self.deadline = started_mono + self.coord.startup_timeout
        self._agent_log_fd = run.open_log(names.agent_log(self.rank))
        self._record_keeper = RecordKeeper(run, out)
        # Started the moment the signal trips, from the tripping thread (_start_failure_record).
        self._record_writer = threading.Thread(target=self._write_failure_record, name="failure-record", daemon=True)
        self._record_phase = PHASE_INIT
        self.signal.on_trip(self._start_failure_record)
        self._bell, self._bell_note = doorbell  # bound by the CLI before the address record
        self._liveness: Liveness | None = None  # exists once the lifecycle runs
        self._stacks: HangStacks | None = None  # a hang's stacks, taken before the teardown
        self._live: LiveStacks | None = None  # answers gym-launch stacks

    def _start_failure_record(self) -> None:
        """Write the failure record the moment the signal trips, from a thread of its own: peers
        react to it, so it must not wait for the main thread to wake and unwind (in a failure
        wave of hundreds of agents on one host that wait was most of a record's delay), and a
        hung shared filesystem must not hold up anything else."""
        self._record_phase = self.log.phase_name()
        self._record_writer.start()

    def _write_failure_record(self) -> None:
        failure = self.signal.failure
        if failure is not None:  # always: the thread starts only once the signal tripped
            write_failure_record(
                self.run,
                self.writer,
                self.rank,
                failure,
                self._record_phase,
                self._record_keeper,
                started_mono=self.started_mono,
            )

    # -- entry -----------------------------------------------------------------------------------

    def run_lifecycle(self) -> RunResult:
        become_subreaper()  # a driver's setsid grandchild stays ours when its parent exits
        self._install_signal_handlers()
        reaper = self._start_reaper()
        channel = ReaperChannel(reaper.stdin)
        supervisor = Supervisor(
            self.signal, self.coord.teardown_grace, channel, self.log.phase_name, spare=(reaper.pid,)
        )
        self.log.on_phase = channel.phase
        node_dir = tempdirs.make(tempdirs.DRIVER_PREFIX)  # node-local: progress board, fallback stack dumps
        channel.temp_dir(node_dir)  # removed by the reaper if we are SIGKILLed
        wake = threading.Event()  # a wait's early end: a peer's `complete` notice, or a failure
        self.signal.on_trip(wake.set)
        ctx = RunContext(
            config=self.config,
            plan=self.plan,
            rank=self.rank,
            address=self.ident.address,
            visible_devices=tuple(self.ident.visible_devices),
            run=self.run,
            writer=self.writer,
            signal=self.signal,
            supervisor=supervisor,
            reaper=channel,
            phase=self.log.phase_name,
            deadline=self.deadline,
            out=self.out,
            filesystem=self.filesystem,
            wake=wake,
            doorbell_carries=lambda: self._liveness_carries(),
            notify_complete=lambda: self._bell.complete() if self._bell is not None else None,
            local_dir=node_dir,
        )
        # First thing when the children are stopped, before any grace: a hang's stacks.
        stacks = self._stacks = HangStacks(ctx)
        supervisor.before_stop(stacks.take)
        judges = JudgeRuntime(ctx)
        ray = RayRuntime(ctx, self.ident.count, self._agent_log_fd)
        liveness = Liveness(
            self.run,
            self.writer,
            self.rank,
            self.ident.count,
            heartbeat_interval=self.coord.heartbeat_interval,
            heartbeat_timeout=self.coord.heartbeat_timeout,
            poll_interval=self.coord.poll_interval,
            signal=self.signal,
            phase=self.log.phase_name,
            fs_stall_timeout=self.coord.fs_stall_timeout,
            completed=wake,
            beacon_timeout=self.coord.beacon_timeout if self.coord.doorbell else 0.0,
        )
        self._liveness = liveness
        preflight = PreflightRuntime(
            ctx,
            hostname=self.ident.hostname,
            scheduler_node=_slurm_node(self.ident),
            probe=self._probe_peers,
            probe_off=self._probe_off,
        )
        driver = DriverRuntime(ctx, judges, ray, self.ident.count)
        running = Running(ctx, reaper, liveness, judges, ray, driver, preflight)
        liveness.heartbeat_extra = running.driver.heartbeat_fields
        running.driver.before_hang = stacks.take_for  # the stacks first: no node tears down before them
        # gym-launch stacks, answered while the run goes (woken by the doorbell, or by its own listing).
        live = LiveStacks(
            self.run, self.writer, self.rank, supervisor, self.signal, self.coord.stack_dump_timeout, node_dir
        )
        live.start()
        self._live = live
        liveness.start()
        self._start_doorbell(liveness, channel)
        try:
            self.states.advance(AgentState.STARTING)
            on = NodeSteps(running, self._agree(running))  # plan agreement gives the topology
            running.driver.arm_grace(on.topo)
            liveness.on_walltime = partial(walltime_failure, ctx, on.topo, running.driver, stacks)
            stacks.driver_node = on.topo.is_driver_node
            self._run_steps(PLACED_STEPS, on)
            self.states.advance(AgentState.RUNNING)
            self._run_steps(RUN_STEPS, on)
        except AgentFailed as exc:
            self.signal.trip(exc.failure)
        except RunDirError as exc:
            self.signal.trip(self._unexpected(FailureKind.RUN_DIR, str(exc)))
        except ray_node.PortsError as exc:
            self.signal.trip(self._unexpected(FailureKind.PORTS, str(exc)))
        except Exception as exc:  # noqa: BLE001 - an agent bug still must clean up and say why
            self.signal.trip(self._unexpected(FailureKind.INTERNAL, f"{type(exc).__name__}: {exc}"))
        failure = self.signal.failure
        if failure is not None:
            return self._teardown_failed(running, failure)
        return self._teardown_succeeded(running)

    def _unexpected(self, kind: FailureKind, cause: str) -> Failure:
        return Failure(kind=kind, cause=cause, phase=self.log.phase_name(), log=names.agent_log(self.rank))

    def _agree(self, running: Running) -> Topology:
        """The steps before the topology exists (every node runs them); they produce it."""
        meet, agreement = AGREEMENT_STEPS
        self.log.begin(meet.phase, self.rendezvous_detail())
        peers = self.rendezvous(running)
        self.log.end()
        self.log.begin(agreement.phase)
        topo = self.agree_plan(running, peers)
        self.log.end(detail=f"node {topo.node.index} of {self.plan.replicas}; head {topo.head_address}")
        return topo

    def _run_steps(self, steps: tuple[Step, ...], on: NodeSteps) -> None:
        for step in steps:
            if not applies(step, on.topo, self.config.ray.enabled):
                continue
            body: Callable[[], str] = getattr(on, step.body)
            self.log.begin(step.phase, getattr(on, step.detail)() if step.detail else "")
            self.log.end(detail=body())

    # -- agreement steps -------------------------------------------------------------------------

    def rendezvous_detail(self) -> str:
        return f"rank {self.rank}/{self.ident.count} at {self.ident.address}"

    def _check_host_allowed(self, ctx: RunContext) -> None:
        """launch.hostnames is the one shared allowlist: a replica on another host fails the run."""
        allowed = self.config.hostnames
        host = self.ident.hostname
        if allowed and host not in allowed and host.split(".")[0] not in allowed:
            raise ctx.fail(
                FailureKind.PLACEMENT,
                f"host {host!r} is not in launch.hostnames ({', '.join(allowed)}); run on a listed host or add "
                "it to the allowlist",
            )

    def rendezvous(self, running: Running) -> list[Peer]:
        self._check_host_allowed(running.ctx)  # the address record was claimed before anything was written
        peers = gather(running.ctx, self.ident.count, seen=self._peers_so_far)
        running.liveness.start_watching()
        if self._bell is not None:
            bells = _bells(peers)
            self._bell.set_peers(bells, watchers=watchers_of(self.rank, self.ident.count))
            ports = {b.rank: b.port for b in bells}
            # Beacons only count when every watched peer rings too (a peer with its doorbell off
            # sends none: its heartbeat file is then the only word of it).
            watched = watched_peers(self.rank, self.ident.count)
            running.liveness.set_beacons(self._bell.is_alive() and all(ports.get(w) is not None for w in watched))
            line = self._bell.reaper_line()
            if line is not None:  # a killed agent's reaper rings for it
                running.ctx.reaper.doorbell(line)
        return peers

    def _peers_so_far(self, peers: list[Peer]) -> None:
        """During rendezvous: a failure now (ours, or one we learn of) rings the peers read so far."""
        if self._bell is not None:
            self._bell.set_peers(_bells(peers), partial=True)

    # -- the doorbell ----------------------------------------------------------------------------

    def _start_doorbell(self, liveness: Liveness, reaper: ReaperChannel) -> None:
        """Arm the doorbell bound before the address record (agent/coord/doorbell.py): a valid ring
        is handled like a listed failure record, and our own stop rings every peer. Without it
        (bind refused, no secret) the run goes on through its files, and the log says so once."""
        bell = self._bell
        if not self.coord.doorbell:
            return
        if bell is None:
            log.warning("doorbell off: %s; failures reach peers through the run directory only", self._bell_note)
            return
        try:
            secret = ensure_secret(self.run)
        except SecretUnavailable as exc:
            self._bell = None
            bell.close()
            log.warning("doorbell off: %s; failures reach peers through the run directory only", exc)
            return
        bell.arm(
            secret,
            run=self.run.path.name,
            attempt=self.run.attempt,
            rank=self.rank,
            incarnation=self.writer.incarnation,
            on_ring=liveness.ring_received,
            stopping=self.signal.is_set,
            on_notice=liveness.notice_received,
            status=liveness.status,
            beacon_every=self.coord.heartbeat_interval,
            on_beacon=reaper.alive,  # the reaper rides out a still heartbeat file as the watchers do
            on_stacks=self._live.ask if self._live is not None else None,
        )
        bell.start()
        log.info("doorbell listening on %s (UDP)", bell.where)
        self.signal.on_trip(self._ring_peers)

    def _ring_peers(self) -> None:
        """Ring with the failure itself: ours, or for a reaction the one it reacts to (as a peer
        following our record to the failure it names would)."""
        failure, bell = self.signal.failure, self._bell
        if failure is None or bell is None or failure.heard_on_doorbell:
            return  # a ring heard was sent to every peer by its sender (three copies): not rung on
        target = failure.reacting_to or {}
        if failure.kind == FailureKind.PEER_FAILURE and isinstance(target.get("rank"), int):
            bell.ring(
                int(target["rank"]),
                str(target.get("incarnation")),
                str(target.get("kind")),
                failure.reacted_cause if failure.reacted_cause is not None else failure.cause,
            )
        else:
            bell.ring(self.rank, self.writer.incarnation, str(failure.kind), failure.cause)

    def _probe_off(self) -> str:
        """Why this agent cannot probe its peers (its doorbell is off), or ""."""
        if not self.coord.doorbell:
            return "[launch.coordination] doorbell = false"
        return "" if self._bell is not None else f"the doorbell is off ({self._bell_note})"

    def _probe_peers(self, peers: Sequence[Peer], timeout: float) -> list[Probed] | None:
        """The preflight's probe of every peer's address, through the doorbell's signed messages."""
        bell = self._bell
        if bell is None:
            return None
        return bell.probe(_bells(list(peers)), self.ident.address, timeout, self.signal.is_set)

    def _liveness_carries(self) -> bool:
        liveness = self._liveness
        return liveness is not None and liveness.doorbell_carries()

    def _doorbell_summary(self) -> dict[str, Any]:
        """The doorbell's counts for the cleanup record (and a line in the log when it dropped any)."""
        bell = self._bell
        if bell is None:
            return {}
        bell.stop()
        bell.join(0.1)  # it only sends what is still due: no filesystem, a few ms
        summary = bell.summary()
        dropped = summary["dropped"]
        if dropped:
            told = ", ".join(f"{n} {why}" for why, n in dropped.items())
            log.info("doorbell: dropped %d datagram(s): %s", sum(dropped.values()), told)
        return {"doorbell": summary}

    @staticmethod
    def _liveness_summary(running: Running) -> dict[str, Any]:
        """Heartbeat files that read corrupt while we watched them (the audit warns of them)."""
        corrupt = running.liveness.corrupt_heartbeats()
        return {"corrupt_heartbeats": {str(r): n for r, n in sorted(corrupt.items())}} if corrupt else {}

    def agree_plan(self, running: Running, peers: list[Peer]) -> Topology:
        phase = self.log.phase_name()
        agree(peers, self.config.fingerprint, phase)
        ordered = node_order(peers, phase, [n.pool for n in self.plan.nodes])
        if len(ordered) != self.plan.replicas:
            raise running.ctx.fail(
                FailureKind.PLAN_MISMATCH,
                f"{len(ordered)} replicas started but the plan has "
                f"{self.plan.replicas}; start exactly {self.plan.replicas} replicas",
            )
        index = next(i for i, p in enumerate(ordered) if p.rank == self.rank)
        planned = self.plan.nodes[index].pool
        if self.ident.pool is not None and planned is not None and self.ident.pool != planned:
            raise running.ctx.fail(
                FailureKind.PLACEMENT,
                f"this node's job step runs pool {self.ident.pool!r} ({JobEnv.POOL}) but it owns planned node "
                f"{index}, of pool {planned!r}: the allocation's pools do not match [pools.*] nodes",
            )
        self.log.node_index, self.log.address = index, self.ident.address
        return Topology(self.plan.nodes[index], tuple(ordered), self.plan.driver_node, self.plan.ray_nodes)

    # -- teardown --------------------------------------------------------------------------------

    def stop_everything(self, running: Running) -> list[dict[str, Any]]:
        supervisor = running.ctx.supervisor
        if self._live is not None:
            self._live.stop()
        running.judges.stop()
        records_ = supervisor.stop_all()
        supervisor.halt()
        running.driver.drain(TEE_DRAIN_S)  # the driver's last lines (a traceback) reach the console first
        running.liveness.stop()
        # A heartbeat write in flight finishes (the process ends without finalization).
        running.liveness.join(LIVENESS_JOIN_S)
        running.ray.keep_session_logs()
        if running.ctx.local_dir is not None:
            shutil.rmtree(running.ctx.local_dir, ignore_errors=True)
        return [r.to_json() for r in records_]

    def _leftovers(self, running: Running, groups: list[dict[str, Any]]) -> list[int]:
        """Whatever still lives in a recorded session or escaped them all: never report a clean
        sweep that was not."""
        sessions = {int(g["session"]) for g in groups}
        left = [p.pid for sid in sessions for p in session_members(sid)]
        return sorted(set(left) | {p.pid for p in escaped_descendants(sessions, {running.reaper.pid})})

    def _teardown_succeeded(self, running: Running) -> RunResult:
        supervisor = running.ctx.supervisor
        supervisor.reaper.stopping()
        self.states.advance(AgentState.STOPPING)
        self.log.begin(TEARDOWN.phase)
        groups = self.stop_everything(running)
        leftovers = self._leftovers(running, groups)
        self.run.write_artifact(
            names.cleanup(self.rank),
            self.writer,
            {
                "outcome": str(RunOutcome.SUCCESS),
                "groups": groups,
                "leftover_pids": leftovers,
                **self._doorbell_summary(),
                **self._liveness_summary(running),
                **running.preflight.residue_fields(),
            },
        )
        self.log.end(detail=f"{len(groups)} process group(s) stopped")
        self.states.advance(AgentState.SUCCEEDED)
        supervisor.finish_reaper()
        self._reap_reaper(running.reaper)
        self.out("SUCCEEDED")
        self._summary(None)
        return RunResult(AgentState.SUCCEEDED, None, 0)

    def _teardown_failed(self, running: Running, failure: Failure) -> RunResult:
        supervisor = running.ctx.supervisor
        supervisor.reaper.stopping()  # heartbeats stop now: the reaper must not fence us
        # The failure record's writer started when the signal tripped (_start_failure_record); the
        # rest of the teardown waits a moment for it, so that in a failure wave records reach the
        # disk before teardowns compete for the CPU. The supervisor thread is stopping our children
        # meanwhile. (The signal's event is set once its listeners ran: the writer has started.)
        keeper = self._record_keeper
        writer = self._record_writer
        self.signal.wait(RECORD_FIRST_S)
        writer.join(RECORD_FIRST_S)
        if not writer.is_alive():  # published: the rest of the teardown yields to peers' records
            lower_priority((running.reaper.pid,))
        self.log.end(PhaseOutcome.FAILED, failure.cause[:300])
        self.states.advance(AgentState.STOPPING)
        if failure.kind == FailureKind.DRIVER_EXIT:
            running.driver.drain(0.5)  # the driver's last words come before our verdict on it
        self.out(f"FAILED in {failure.phase or self.log.phase_name()}: {failure.kind}: {failure.cause}")
        groups = self.stop_everything(running)
        writer.join(FAILURE_WRITE_BUDGET_S)
        if self._stacks is not None:
            self._stacks.write(keeper)  # taken before the first child was stopped
        leftovers = self._leftovers(running, groups)
        keeper.write(
            names.cleanup(self.rank),
            self.writer,
            {
                "outcome": str(RunOutcome.FAILURE),
                "groups": groups,
                "leftover_pids": leftovers,
                **self._doorbell_summary(),
                **self._liveness_summary(running),
                **running.preflight.residue_fields(),
            },
        )
        self.states.advance(AgentState.FAILED)
        supervisor.finish_reaper()
        self._reap_reaper(running.reaper)
        if keeper.pending and not keeper.flush(RECORD_RETRY_S):
            self.out(f"gave up writing {sorted(keeper.pending)} to the run directory; see {local_dir(self.run)}")
        self._summary(failure)
        return RunResult(AgentState.FAILED, failure, 1)

    def _summary(self, failure: Failure | None) -> None:
        """The last lines of the job log: the outcome, the cause, and where to look next."""
        if failure is None:
            # An agent sees its own lifecycle, not whether the driver trained: the verdict is the audit's.
            self.out(f"summary: agents succeeded (the driver exited 0); the verdict: gym-audit {self.run.path}")
            return
        where = failure.phase or self.log.phase_name()
        self.out(f"summary: run FAILED; this replica: {failure.kind} in {where}: {failure.cause}")
        if failure.log:
            self.out(f"summary: log: {self.run.path / failure.log}")
        self.out(f"summary: the run's first cause and every rank's view: gym-audit {self.run.path}")

    # -- reaper and signals ----------------------------------------------------------------------

    def _start_reaper(self) -> subprocess.Popen[str]:
        argv = [
            sys.executable,
            "-m",
            "agent.reaper",
            "--run-dir",
            str(self.run.path),
            "--rank",
            str(self.rank),
            "--incarnation",
            self.writer.incarnation,
            "--fingerprint",
            self.config.fingerprint,
            "--agent-pid",
            str(os.getpid()),
            "--grace",
            str(self.coord.teardown_grace),
            "--heartbeat-timeout",
            str(self.coord.heartbeat_timeout),
            "--poll",
            str(self.coord.poll_interval),
            "--agent-started",
            repr(self.started_mono),
        ]
        with signals.unblocked():
            return subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                text=True,
                start_new_session=True,
                stdout=self._agent_log_fd,
                stderr=self._agent_log_fd,
                close_fds=True,
                env=child_env({}),
            )

    @staticmethod
    def _reap_reaper(reaper: subprocess.Popen[str]) -> None:
        try:
            reaper.wait(timeout=10)
        except subprocess.TimeoutExpired:
            reaper.kill()
            reaper.wait()

    def _install_signal_handlers(self) -> None:
        def received(sig: signals.Received) -> None:
            self.signal.trip(
                Failure(kind=FailureKind.SIGNAL, cause=sig.describe(), phase=self.log.phase_name(), **sig.facts())
            )

        # SIGTERM/SIGINT with their sender (si_pid): a scheduler's reaction is told from a cause.
        signals.start(received)


def _bells(peers: list[Peer]) -> list[PeerBell]:
    return [PeerBell(p.rank, p.address, p.doorbell_port, p.incarnation) for p in peers]


def _slurm_node(ident: Identity) -> str | None:
    """Slurm's name for this node (what `--exclude` takes), when a Slurm job runs us."""
    job = ident.scheduler_job
    return job.node if job is not None and job.scheduler == "slurm" else None
