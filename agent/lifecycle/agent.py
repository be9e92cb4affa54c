"""One replica's lifecycle: two tables of steps run in order, under an enforced overall state.

    INIT -> STARTING (STARTUP_STEPS) -> RUNNING (RUN_STEPS) -> STOPPING -> SUCCEEDED
    any failure, from INIT, STARTING or RUNNING:               STOPPING -> FAILED

Each step names its phase, the nodes it applies to, and what it runs (ARCHITECTURE.md has the
table). Any failure (a child exits, the driver fails, SIGTERM/SIGINT, a peer's failure record,
a silent peer, the single startup deadline) writes this replica's failure record, stops every
local process group and writes its cleanup record; the agent then exits non-zero.
"""

from __future__ import annotations

import enum
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.coord import clock, rendezvous
from agent.coord.durable import RecordKeeper, local_dir
from agent.coord.failure import AgentFailed, Failure, FailureSignal, write_failure_record
from agent.coord.identity import Identity
from agent.coord.liveness import Liveness
from agent.judges.runtime import JudgeRuntime
from agent.lifecycle.console_tee import ConsoleTee
from agent.lifecycle.context import RunContext, Topology
from agent.proc import signals
from agent.proc.cpu_priority import lower_priority
from agent.proc.procgroup import become_subreaper, escaped_descendants, session_members
from agent.proc.supervisor import ExitPolicy, Supervisor, child_env
from agent.proc.waits import poll_until
from agent.ray import logs as ray_logs
from agent.ray import node as ray_node
from agent.reaper import ReaperChannel
from launch.spec.config import RunConfig
from launch.spec.plan import Plan
from schemas import (
    AgentState,
    DriverEnv,
    FailureKind,
    Phase,
    PhaseOutcome,
    RunDir,
    RunDirError,
    RunOutcome,
    Writer,
    names,
    records,
)
from schemas.safe_io import Sync
from schemas.vocab import PHASE_INIT, STATE_TRANSITIONS

RECORD_RETRY_S = 20.0  # how long refused records are retried (space may come back) before exit
FAILURE_WRITE_BUDGET_S = 5.0  # a hung shared filesystem must not stop us from killing children
LIVENESS_JOIN_S = 2.0  # bounded: a hung shared filesystem may hold its last heartbeat write
RECORD_FIRST_S = 1.0  # how long the rest of a failed teardown waits for the failure record first
RAY_START_ATTEMPTS = 3
RAY_UP_MIN_WAIT_S = 30.0  # a node may come up slowly on a loaded machine, even past startup_timeout
RAY_UP_POLL_S = 0.2
TEE_DRAIN_S = 2.0


@dataclass(frozen=True)
class RunResult:
    """All-or-nothing outcome of one agent: it succeeded, or it failed with one recorded cause."""

    state: AgentState
    failure: Failure | None
    exit_code: int


class IllegalTransition(RuntimeError):
    """An agent bug: a state change STATE_TRANSITIONS does not allow."""


class PhaseLog:
    """Prints one line per phase transition and keeps `phases-RANK.json` current."""

    def __init__(self, run: RunDir, writer: Writer, rank: int, out: Callable[[str], None]) -> None:
        self.run = run
        self.writer = writer
        self.rank = rank
        self.out = out
        self.state = AgentState.INIT
        self.current: Phase | None = None
        self.entries: list[dict[str, Any]] = []
        self.node_index: int | None = None
        self.address: str | None = None
        self.on_phase: Callable[[str], None] = lambda _phase: None  # the reaper must know where we died
        self._lock = threading.Lock()

    def phase_name(self) -> str:
        return str(self.current) if self.current else PHASE_INIT

    def begin(self, phase: Phase, detail: str = "") -> None:
        with self._lock:
            self.current = phase
            self.entries.append(
                {
                    "phase": str(phase),
                    "started_at": clock.wall(),
                    "ended_at": None,
                    "outcome": str(PhaseOutcome.RUNNING),
                    "detail": detail,
                }
            )
        self.out(f"{self.state} {phase} ...{' ' + detail if detail else ''}")
        self.on_phase(str(phase))
        self._save()

    def end(self, outcome: PhaseOutcome = PhaseOutcome.OK, detail: str = "") -> None:
        with self._lock:
            if not self.entries or self.entries[-1]["outcome"] != PhaseOutcome.RUNNING:
                return
            e = self.entries[-1]
            e["ended_at"] = clock.wall()
            e["outcome"] = str(outcome)
            if detail:
                e["detail"] = detail
            took = e["ended_at"] - e["started_at"]
        self.out(f"{self.state} {e['phase']} {outcome} ({took:.2f}s){' ' + detail if detail else ''}")
        self._save()

    def set_state(self, state: AgentState) -> None:
        if state not in STATE_TRANSITIONS[self.state]:
            raise IllegalTransition(f"agent state {self.state} -> {state} is not allowed")
        self.state = state
        self._save()

    def _save(self) -> None:
        with self._lock:
            fields = {
                "state": str(self.state),
                "node_index": self.node_index,
                "address": self.address,
                "phases": [dict(e) for e in self.entries],
            }
        # Rewritten at every transition: only the final state is fsynced (a crash of this host
        # loses at most the latest transitions; close() still publishes each to NFS readers).
        final = self.state in (AgentState.SUCCEEDED, AgentState.FAILED)
        sync = Sync.BEFORE_RENAME if final else Sync.NONE
        try:
            self.run.write_artifact(names.phases(self.rank), "phases", self.writer, fields, sync=sync)
        except OSError:
            pass  # the timeline is evidence, not control: never fail the run over it


class Nodes(enum.Enum):
    """Which nodes a step runs on (known once the plan is agreed; before that every node)."""

    ALL = "all"
    HEAD = "head"
    DRIVER_NODE = "driver node"
    DRIVER_NOT_HEAD = "driver node, unless it is the head"
    RAY = "nodes of the Ray cluster"


@dataclass(frozen=True)
class Step:
    """One phase of the lifecycle: where it runs and what it does. `run` returns the detail
    printed when the phase ends; `detail` the one printed when it begins."""

    phase: Phase
    nodes: Nodes
    run: Callable[[Agent], str]
    needs_ray: bool = False
    detail: Callable[[Agent], str] = lambda _agent: ""


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
    ) -> None:
        self.config = config
        self.plan = plan
        self.ident = ident
        self.run = run
        self.rank = ident.rank
        self.coord = config.coordination
        self.writer = Writer(config.fingerprint, ident.rank, incarnation, clock_offset=clock.skew())
        self.signal = FailureSignal()
        self.log = PhaseLog(run, self.writer, ident.rank, out)
        self.out = out
        self.deadline = started_mono + self.coord.startup_timeout
        self._peers: list[rendezvous.Peer] = []  # in rank order, until plan agreement orders them
        self.topo: Topology | None = None
        self.gcs_address: str | None = None
        self.temp_dir: str | None = None
        self._ray_ports: ray_node.RayPorts | None = None
        self.reaper: subprocess.Popen | None = None
        self.supervisor: Supervisor | None = None
        self.liveness: Liveness | None = None
        self._ctx: RunContext | None = None
        self._judges: JudgeRuntime | None = None
        self._driver_done = threading.Event()
        self._driver_seconds = 0.0
        self._driver_tee: ConsoleTee | None = None
        self._agent_log_fd = run.open_log(names.agent_log(self.rank))
        self._record_keeper = RecordKeeper(run, out)
        self._record_writer: threading.Thread | None = None
        self.signal.on_trip(self._start_failure_record)

    def _start_failure_record(self) -> None:
        """Write the failure record the moment the signal trips, from a thread of its own: peers
        react to it, so it must not wait for the main thread to wake and unwind (in a failure
        wave of hundreds of agents on one host that wait was most of a record's delay), and a
        hung shared filesystem must not hold up anything else."""
        failure = self.signal.failure
        assert failure is not None
        self._record_writer = threading.Thread(
            target=write_failure_record,
            args=(self.run, self.writer, self.rank, failure, self.log.phase_name(), self._record_keeper),
            name="failure-record",
            daemon=True,
        )
        self._record_writer.start()

    # -- parts that exist once the lifecycle runs --------------------------------------------------

    @property
    def ctx(self) -> RunContext:
        assert self._ctx is not None, "the run context exists once run_lifecycle started"
        return self._ctx

    @property
    def judges(self) -> JudgeRuntime:
        assert self._judges is not None
        return self._judges

    @property
    def node_topo(self) -> Topology:
        assert self.topo is not None, "the topology is known after plan agreement"
        return self.topo

    def applies(self, step: Step) -> bool:
        if step.needs_ray and not self.config.ray.enabled:
            return False
        if step.nodes is Nodes.ALL:
            return True
        topo = self.node_topo
        if step.nodes is Nodes.HEAD:
            return topo.is_head
        if step.nodes is Nodes.DRIVER_NODE:
            return topo.is_driver_node
        if step.nodes is Nodes.RAY:
            return topo.in_ray
        return topo.is_driver_node and not topo.is_head

    # -- entry -----------------------------------------------------------------------------------

    def run_lifecycle(self) -> RunResult:
        become_subreaper()  # a driver's setsid grandchild stays ours when its parent exits
        self._install_signal_handlers()
        self._start_reaper()
        channel = ReaperChannel(self.reaper.stdin if self.reaper else None)
        supervisor = Supervisor(
            self.signal,
            self.coord.teardown_grace,
            channel,
            self.log.phase_name,
            spare=(self.reaper.pid,) if self.reaper else (),
        )
        self.supervisor = supervisor
        self.log.on_phase = channel.phase
        self._ctx = RunContext(
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
        )
        self._judges = JudgeRuntime(self._ctx)
        self.liveness = Liveness(
            self.run,
            self.writer,
            self.rank,
            self.ident.count,
            heartbeat_interval=self.coord.heartbeat_interval,
            heartbeat_timeout=self.coord.heartbeat_timeout,
            poll_interval=self.coord.poll_interval,
            signal=self.signal,
            phase=self.log.phase_name,
        )
        self.liveness.start()
        try:
            self.log.set_state(AgentState.STARTING)
            self._run_steps(STARTUP_STEPS)
            self.log.set_state(AgentState.RUNNING)
            self._run_steps(RUN_STEPS)
        except AgentFailed as exc:
            self.signal.trip(exc.failure)
        except RunDirError as exc:
            self.signal.trip(self._unexpected(FailureKind.RUN_DIR, str(exc)))
        except ray_node.PortsError as exc:
            self.signal.trip(self._unexpected(FailureKind.PORTS, str(exc)))
        except Exception as exc:  # noqa: BLE001 - an agent bug still must clean up and say why
            self.signal.trip(self._unexpected(FailureKind.INTERNAL, f"{type(exc).__name__}: {exc}"))
        if self.signal.is_set():
            return self._teardown_failed()
        return self._teardown_succeeded()

    def _unexpected(self, kind: FailureKind, cause: str) -> Failure:
        return Failure(kind=kind, cause=cause, phase=self.log.phase_name(), log=names.agent_log(self.rank))

    def _run_steps(self, steps: tuple[Step, ...]) -> None:
        for step in steps:
            if not self.applies(step):
                continue
            self.log.begin(step.phase, step.detail(self))
            detail = step.run(self)
            self.log.end(detail=detail)

    # -- startup steps ---------------------------------------------------------------------------

    def _check_host_allowed(self) -> None:
        """launch.hostnames is the one shared allowlist: a replica on another host fails the run."""
        allowed = self.config.hostnames
        host = self.ident.hostname
        if allowed and host not in allowed and host.split(".")[0] not in allowed:
            raise self.ctx.fail(
                FailureKind.PLACEMENT,
                f"host {host!r} is not in launch.hostnames ({', '.join(allowed)}); run on a listed host or add "
                "it to the allowlist",
            )

    def _rendezvous(self) -> str:
        self._check_host_allowed()  # the address record was claimed before anything was written
        self._peers = rendezvous.gather(self.ctx, self.ident.count)
        assert self.liveness is not None
        self.liveness.start_watching()
        return ""

    def _agree_plan(self) -> str:
        phase = self.log.phase_name()
        rendezvous.agree(self._peers, self.config.fingerprint, phase)
        peers = rendezvous.node_order(self._peers, phase)
        if len(peers) != self.plan.replicas:
            raise self.ctx.fail(
                FailureKind.PLAN_MISMATCH,
                f"{len(peers)} replicas started but the plan has "
                f"{self.plan.replicas}; start exactly {self.plan.replicas} replicas",
            )
        index = next(i for i, p in enumerate(peers) if p.rank == self.rank)
        self.topo = Topology(self.plan.nodes[index], tuple(peers), self.plan.driver_node, self.plan.ray_nodes)
        self.log.node_index, self.log.address = index, self.ident.address
        return f"node {index} of {self.plan.replicas}; head {self.topo.head_address}"

    def _check_devices(self) -> str:
        devices = self.ident.visible_devices
        if len(devices) != self.plan.gpus_per_replica:
            raise self.ctx.fail(
                FailureKind.PLACEMENT,
                f"rank {self.rank} sees {len(devices)} GPUs "
                f"(CUDA_VISIBLE_DEVICES={','.join(devices) or 'unset'}) but the plan needs "
                f"gpus_per_replica={self.plan.gpus_per_replica}; fix the allocation or "
                "launch.gpus_per_replica",
            )
        return f"{len(devices)} GPU(s) visible"

    def _write_placement(self) -> str:
        topo = self.node_topo
        node = topo.node
        vis = self.ident.visible_devices
        ray_mask = {vis[i] for i in node.ray_devices}
        for name, devs in node.judge_devices.items():
            if ray_mask & {vis[i] for i in devs}:
                raise self.ctx.fail(FailureKind.PLACEMENT, f"judge {name}'s devices overlap Ray's on node {node.index}")
        fields = records.placement_fields(
            node_index=node.index,
            address=self.ident.address,
            visible_devices=vis,
            trainer_gpus=node.trainer_gpus,
            rollout_gpus=node.rollout_gpus,
            ray_devices=node.ray_devices,
            ray_num_gpus=node.ray_gpus,
            judge_devices=node.judge_devices,
            unused_devices=node.unused_devices,
            is_head=topo.is_head,
            is_driver_node=topo.is_driver_node,
        )
        self.run.write_artifact(names.placement(self.rank), "placement", self.writer, fields)
        return ""

    def _ray_role(self) -> str:
        return "head" if self.node_topo.is_head else f"worker of {self.node_topo.head_address}"

    def _ray_resources(self) -> dict[str, float]:
        node = self.node_topo.node
        res: dict[str, float] = {}
        if node.pool and node.pool in self.config.ray.resources:
            res.update({k: float(v) for k, v in self.config.ray.resources[node.pool].items()})
        return res

    def _start_ray(self) -> str:
        topo = self.node_topo
        if self.config.ray.dashboard and topo.is_head:
            missing = ray_node.dashboard_missing()
            if missing:
                raise self.ctx.fail(
                    FailureKind.PLACEMENT,
                    f"ray.dashboard = true but this node's Ray cannot serve it ({missing}); install "
                    "ray[default] in the image (pip install 'gym-agent[dashboard]') or set ray.dashboard = false",
                )
        self.temp_dir = ray_node.short_temp_dir()
        self.ctx.reaper.temp_dir(self.temp_dir)  # removed by the reaper if we are SIGKILLed
        if not topo.is_head:
            self.ctx.wait_startup("the Ray head's address", self._head_known)
        for attempt in range(1, RAY_START_ATTEMPTS + 1):
            ports = ray_node.pick_ports(
                self.run.path.name, self.rank + (attempt - 1) * self.ident.count, self.ident.count * RAY_START_ATTEMPTS
            )
            if topo.is_head:
                self.gcs_address = f"{self.ident.address}:{ports.gcs}"
            if self._spawn_ray(ports):
                self._ray_ports = ports
                break
            if attempt == RAY_START_ATTEMPTS:
                raise self.ctx.fail(
                    FailureKind.CHILD_EXIT,
                    f"ray start exited at once {attempt} times (ports taken?)",
                    log=names.ray_log(self.rank),
                )
        if topo.is_head:
            self.run.write_artifact(names.RAY_HEAD, "ray-head", self.writer, {"gcs_address": self.gcs_address})
            if self.config.ray.dashboard:
                self.out(f"Ray dashboard: http://{self.ident.address}:{self._ray_ports.dashboard}")
        return ""

    def _head_known(self) -> bool:
        if not self.ctx.listed(names.RAY_HEAD):
            return False
        doc = self.run.read_json(names.RAY_HEAD)
        if not doc or doc.get("fingerprint") != self.config.fingerprint:
            return False
        self.gcs_address = str(doc["gcs_address"])
        return True

    def _spawn_ray(self, ports: ray_node.RayPorts) -> bool:
        """Start Ray on probation until every port it should bind accepts connections. Ports are
        picked and then bound by Ray: if another process took one, Ray exits during probation,
        which is retried with new ports instead of failing the run. A fixed probation time is
        not enough: on a loaded host a node can take several seconds to bind its last port."""
        topo = self.node_topo
        node = topo.node
        vis = self.ident.visible_devices
        spec = ray_node.RayNodeSpec(
            is_head=topo.is_head,
            address=self.ident.address,
            head_address=self.gcs_address or "",
            ports=ports,
            num_gpus=node.ray_gpus,
            num_cpus=self.config.ray.num_cpus,
            object_store_memory=self.config.ray.object_store_memory,
            temp_dir=self.temp_dir or "",
            resources=self._ray_resources(),
            extra_args=self.config.ray.extra_args,
            dashboard=self.config.ray.dashboard and topo.is_head,
        )
        env = ray_node.ray_env(child_env({}), ",".join(vis[i] for i in node.ray_devices), self.temp_dir or "")
        supervisor = self.ctx.supervisor
        early: list[int] = []
        log = names.ray_log(self.rank)
        group = supervisor.start(
            "ray-head" if topo.is_head else "ray-worker",
            ray_node.ray_start_argv(spec),
            env=env,
            log_fd=self.run.open_log(log),
            policy=ExitPolicy(FailureKind.CHILD_EXIT, log, on_exit=early.append),
            term_leader_only=True,
        )
        t0 = clock.mono()
        limit = max(RAY_UP_MIN_WAIT_S, self.deadline - t0)

        def up_or_exited() -> bool:
            return bool(early) or ray_node.ray_is_up(self.ident.address, ports, topo.is_head)

        if not poll_until(up_or_exited, deadline=t0 + limit, interval=RAY_UP_POLL_S, signal=self.signal):
            raise self.ctx.fail(
                FailureKind.STARTUP_TIMEOUT,
                f"Ray did not open its ports within {limit:.0f}s (ports {ports.gcs}-{ports.max_worker})",
                log=log,
            )
        if early:
            return False
        supervisor.set_policy(group, ExitPolicy(FailureKind.CHILD_EXIT, log))
        return True

    def _readiness_gate(self) -> str:
        """The head checks Ray's live nodes against the plan and writes ray-layout.json."""
        assert self.gcs_address is not None
        peers = self.node_topo.peers
        # Exactly the nodes that join: the head and the nodes of the spanned pools.
        expected = {peers[i].address: float(self.plan.nodes[i].ray_gpus) for i in self.plan.ray_nodes}
        t0 = clock.mono()
        remaining = max(5.0, self.deadline - clock.mono())
        try:
            live = ray_node.probe_live_nodes(
                self.gcs_address,
                self.ident.address,
                len(expected),
                remaining,
                self._agent_log_fd,
                self.signal.is_set,
                progress=self.out,
                progress_every=self.coord.progress_interval,
            )
        except (RuntimeError, ValueError) as exc:
            self.signal.raise_if_set()
            raise self.ctx.fail(
                FailureKind.LAYOUT, f"could not read Ray's live nodes: {exc}", log=names.ray_log(self.rank)
            ) from None
        check = ray_node.compare_layout(expected, live)
        self.run.write_artifact(
            names.RAY_LAYOUT,
            "ray-layout",
            self.writer,
            {
                "head_address": self.ident.address,
                "ray_address": self.gcs_address,
                "expected": check.expected,
                "actual": check.actual,
                "live_nodes": check.live_nodes,
                "passed": check.passed,
                "problems": check.problems,
                "waited_s": round(clock.mono() - t0, 3),
            },
        )
        if not check.passed:
            raise self.ctx.fail(
                FailureKind.LAYOUT, "Ray's live layout differs from the plan: " + "; ".join(check.problems)
            )
        return ""

    def _await_readiness(self) -> str:
        """The driver's node, when it is not the head, waits for the head's readiness verdict."""
        self.ctx.wait_startup(f"{names.RAY_LAYOUT} from the head", lambda: self.ctx.listed(names.RAY_LAYOUT))
        layout = self.run.read_json(names.RAY_LAYOUT) or {}
        if not layout.get("passed"):
            raise self.ctx.fail(
                FailureKind.LAYOUT, "the head's readiness gate failed: " + "; ".join(layout.get("problems", []))
            )
        return ""

    # -- run steps -------------------------------------------------------------------------------

    def driver_env(self) -> dict[str, str]:
        topo = self.node_topo
        plan_json = self.plan.to_json()
        plan_json["addresses"] = [p.address for p in topo.peers]
        self.run.ensure_dir(names.CHECKPOINTS_DIR)  # one directory for every attempt of the run
        extra = {
            **(
                {DriverEnv.RAY_ADDRESS: self.gcs_address or "", DriverEnv.RAY_ADDRESS_CLUSTER: self.gcs_address or ""}
                if self.config.ray.enabled
                else {}
            ),
            DriverEnv.RUN_DIR: str(self.run.path),
            DriverEnv.RANK: str(self.rank),
            DriverEnv.NODE_INDEX: str(topo.node.index),
            DriverEnv.NODE_ADDRESS: self.ident.address,
            DriverEnv.FINGERPRINT: self.config.fingerprint,
            DriverEnv.INCARNATION: self.writer.incarnation,
            DriverEnv.ATTEMPT: str(self.run.attempt),
            DriverEnv.CHECKPOINT_DIR: str(self.run.path / names.CHECKPOINTS_DIR),
            DriverEnv.PLAN: json.dumps(plan_json, sort_keys=True),
            DriverEnv.DRIVER_RESULT: str(self.run.path / names.DRIVER_RESULT),
            **self._run_file_env(),
            **self.judges.driver_env(),
            **self._spec_env(),
        }
        return child_env(extra)

    def _run_file_env(self) -> dict[str, str]:
        """The user's run file, byte for byte, for a driver that reads it (a MILES trainer does)."""
        text = self.config.spec.source_text
        if text is None:
            return {}
        rel = names.run_file(text)
        if not self.ctx.listed(rel):
            self.run.write_bytes(rel, text.encode("utf-8"))
        return {DriverEnv.RUN_FILE: str(self.run.path / rel)}

    def _spec_env(self) -> dict[str, str]:
        """``[driver] env``; a ``runtime:VAR`` value is VAR of the job's environment."""
        out: dict[str, str] = {}
        for key, value in self.config.driver.env.items():
            if value.startswith("runtime:"):
                var = value[len("runtime:") :]
                if var not in os.environ:
                    raise self.ctx.fail(
                        FailureKind.PLACEMENT,
                        f"driver.env.{key} = {value!r} but {var} is not set in the job's environment",
                    )
                value = os.environ[var]
            out[key] = value
        return out

    def _driver_argv(self) -> tuple[list[str], bool]:
        cmd = self.config.driver.command
        shell = isinstance(cmd, str)
        return ([cmd] if shell else list(cmd)), shell

    def _driver_detail(self) -> str:
        if not self.node_topo.is_driver_node:
            return f"supervising; the driver runs on node {self.plan.driver_node}"
        return " ".join(self._driver_argv()[0])

    def _drive(self) -> str:
        topo = self.node_topo
        if not topo.is_driver_node:
            # The driver's node acknowledges right after writing complete.json. Its ack is found by
            # listing acks/ (empty while the driver runs), not the large top-level directory:
            # O(1) per poll per agent instead of O(N).
            driver_ack = names.leaf(names.ack(topo.rank_of_node(self.plan.driver_node)))
            self.ctx.wait_unbounded(lambda: self.ctx.listed(driver_ack, names.ACKS_DIR))
            return ""
        argv, shell = self._driver_argv()
        t0 = clock.mono()

        def on_exit(code: int) -> None:
            if code != 0:
                self.signal.trip(
                    Failure(
                        kind=FailureKind.DRIVER_EXIT,
                        cause=f"the driver exited with code {code}",
                        phase=str(Phase.DRIVER),
                        log=names.driver_log(self.rank),
                        exit_code=code,
                    )
                )
            self._driver_done.set()

        # driver-RANK.log keeps every byte; the console (the job log on Slurm/Beaker) gets each line
        # with a rank prefix.
        self._driver_tee = ConsoleTee(self.run.open_log(names.driver_log(self.rank)), f"[rank {self.rank} driver] ")
        try:
            self.ctx.supervisor.start(
                "driver",
                argv,
                env=self.driver_env(),
                log_fd=self._driver_tee.write_fd,
                policy=ExitPolicy(FailureKind.DRIVER_EXIT, names.driver_log(self.rank), on_exit),
                shell=shell,
            )
        finally:
            self._driver_tee.close_child_end()
        self.ctx.wait_unbounded(self._driver_done.is_set)
        self.signal.raise_if_set()
        self._driver_seconds = clock.mono() - t0
        return "exit 0"

    def _complete(self) -> str:
        """The driver's node records completion; every other node confirms it can read it."""
        if self.node_topo.is_driver_node:
            self.run.write_artifact(
                names.COMPLETE,
                "complete",
                self.writer,
                {"driver_rank": self.rank, "driver_exit_code": 0, "driver_seconds": round(self._driver_seconds, 3)},
            )
            return ""
        if self.run.read_json(names.COMPLETE) is None:
            raise self.ctx.fail(FailureKind.INTERNAL, "the driver's node acknowledged but complete.json is unreadable")
        return ""

    def _acknowledge(self) -> str:
        self.run.write_artifact(names.ack(self.rank), "ack", self.writer, {"outcome": str(RunOutcome.SUCCESS)})
        every_ack = {names.leaf(names.ack(r)) for r in range(self.ident.count)}

        def all_acked() -> bool:
            return every_ack <= set(self.run.listdir(names.ACKS_DIR))

        self.ctx.wait_bounded(
            "an acknowledgement from every replica",
            all_acked,
            kind=FailureKind.ACK_TIMEOUT,
            timeout=self.coord.ack_timeout,
        )
        assert self.liveness is not None
        self.liveness.stop_watching()  # peers may now exit: their silence is expected
        return ""

    # -- teardown --------------------------------------------------------------------------------

    def _stop_everything(self) -> list[dict]:
        assert self.supervisor is not None
        if self._judges is not None:
            self._judges.stop()
        records_ = self.supervisor.stop_all()
        self.supervisor.halt()
        if self._driver_tee is not None:
            self._driver_tee.join(TEE_DRAIN_S)  # the driver's last lines (a traceback) reach the console first
        if self.liveness:
            self.liveness.stop()
            # A heartbeat write in flight finishes (the process ends without finalization).
            self.liveness.join(LIVENESS_JOIN_S)
        if self.temp_dir:
            # Ray's own logs (raylet, GCS, workers) are the evidence of a Ray-side death: keep
            # them before the temp dir goes.
            kept = ray_logs.keep(
                self.temp_dir, self.run, names.ray_session_dir(self.rank), self.config.ray.session_log_bytes
            )
            if kept.files:
                self.out(f"kept {kept.describe()} of Ray's session logs in {names.ray_session_dir(self.rank)}/")
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        return [r.to_json() for r in records_]

    def _leftovers(self, groups: list[dict]) -> list[int]:
        """Whatever still lives in a recorded session or escaped them all: never report a clean
        sweep that was not."""
        sessions = {int(g["session"]) for g in groups}
        spare = {self.reaper.pid} if self.reaper else set()
        left = [p.pid for sid in sessions for p in session_members(sid)]
        return sorted(set(left) | {p.pid for p in escaped_descendants(sessions, spare)})

    def _teardown_succeeded(self) -> RunResult:
        assert self.supervisor is not None
        self.supervisor.reaper.stopping()
        self.log.set_state(AgentState.STOPPING)
        self.log.begin(Phase.TEARDOWN)
        groups = self._stop_everything()
        leftovers = self._leftovers(groups)
        self.run.write_artifact(
            names.cleanup(self.rank),
            "cleanup",
            self.writer,
            {"outcome": str(RunOutcome.SUCCESS), "groups": groups, "leftover_pids": leftovers},
        )
        self.log.end(detail=f"{len(groups)} process group(s) stopped")
        self.log.set_state(AgentState.SUCCEEDED)
        assert self.supervisor is not None
        self.supervisor.finish_reaper()
        self._reap_reaper()
        self.out("SUCCEEDED")
        self._summary(None)
        return RunResult(AgentState.SUCCEEDED, None, 0)

    def _teardown_failed(self) -> RunResult:
        failure = self.signal.failure
        assert failure is not None
        assert self.supervisor is not None
        self.supervisor.reaper.stopping()  # heartbeats stop now: the reaper must not fence us
        # The failure record's writer started when the signal tripped (_start_failure_record); the
        # rest of the teardown waits a moment for it, so that in a failure wave records reach the
        # disk before teardowns compete for the CPU. The supervisor thread is stopping our children
        # meanwhile.
        keeper = self._record_keeper
        writer = self._record_writer
        assert writer is not None
        writer.join(RECORD_FIRST_S)
        if not writer.is_alive():  # published: the rest of the teardown yields to peers' records
            lower_priority((self.reaper.pid,) if self.reaper else ())
        self.log.end(PhaseOutcome.FAILED, failure.cause[:300])
        self.log.set_state(AgentState.STOPPING)
        if self._driver_tee is not None and failure.kind == FailureKind.DRIVER_EXIT:
            self._driver_tee.join(0.5)  # the driver's last words come before our verdict on it
        self.out(f"FAILED in {failure.phase or self.log.phase_name()}: {failure.kind}: {failure.cause}")
        groups = self._stop_everything()
        writer.join(FAILURE_WRITE_BUDGET_S)
        leftovers = self._leftovers(groups)
        keeper.write(
            names.cleanup(self.rank),
            "cleanup",
            self.writer,
            {"outcome": str(RunOutcome.FAILURE), "groups": groups, "leftover_pids": leftovers},
        )
        self.log.set_state(AgentState.FAILED)
        assert self.supervisor is not None
        self.supervisor.finish_reaper()
        self._reap_reaper()
        if keeper.pending and not keeper.flush(RECORD_RETRY_S):
            self.out(f"gave up writing {sorted(keeper.pending)} to the run directory; see {local_dir(self.run)}")
        self._summary(failure)
        return RunResult(AgentState.FAILED, failure, 1)

    def _summary(self, failure: Failure | None) -> None:
        """The last lines of the job log: the outcome, the cause, and where to look next."""
        if failure is None:
            self.out(f"summary: run succeeded; details: gym-audit {self.run.path}")
            return
        where = failure.phase or self.log.phase_name()
        self.out(f"summary: run FAILED; this replica: {failure.kind} in {where}: {failure.cause}")
        if failure.log:
            self.out(f"summary: log: {self.run.path / failure.log}")
        self.out(f"summary: the run's first cause and every rank's view: gym-audit {self.run.path}")

    # -- reaper and signals ----------------------------------------------------------------------

    def _start_reaper(self) -> None:
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
        ]
        with signals.unblocked():
            self.reaper = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                text=True,
                start_new_session=True,
                stdout=self._agent_log_fd,
                stderr=self._agent_log_fd,
                close_fds=True,
                env=child_env({}),
            )

    def _reap_reaper(self) -> None:
        if self.reaper is not None:
            try:
                self.reaper.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.reaper.kill()
                self.reaper.wait()

    def _install_signal_handlers(self) -> None:
        def received(sig: signals.Received) -> None:
            self.signal.trip(
                Failure(kind=FailureKind.SIGNAL, cause=sig.describe(), phase=self.log.phase_name(), **sig.facts())
            )

        # SIGTERM/SIGINT with their sender (si_pid): a scheduler's reaction is told from a cause.
        signals.start(received)


# The lifecycle, in order. Before plan agreement every node runs every step; after it, each
# step runs only on the nodes it names.
STARTUP_STEPS: tuple[Step, ...] = (
    Step(
        Phase.RENDEZVOUS,
        Nodes.ALL,
        Agent._rendezvous,
        detail=lambda a: f"rank {a.rank}/{a.ident.count} at {a.ident.address}",
    ),
    Step(Phase.PLAN_AGREEMENT, Nodes.ALL, Agent._agree_plan),
    Step(Phase.DATA_CHECK, Nodes.ALL, lambda a: a.judges.check_data()),
    Step(Phase.DEVICES, Nodes.ALL, Agent._check_devices),
    Step(Phase.PLACEMENT, Nodes.ALL, Agent._write_placement),
    Step(Phase.JUDGES_START, Nodes.ALL, lambda a: a.judges.start_local(a.node_topo)),
    Step(Phase.RAY_START, Nodes.RAY, Agent._start_ray, needs_ray=True, detail=Agent._ray_role),
    Step(Phase.JUDGE_HEALTH, Nodes.ALL, lambda a: a.judges.wait_local_healthy()),
    Step(Phase.READINESS, Nodes.HEAD, Agent._readiness_gate, needs_ray=True),
    Step(
        Phase.AWAIT_READINESS,
        Nodes.DRIVER_NOT_HEAD,
        Agent._await_readiness,
        needs_ray=True,
        detail=lambda _a: "waiting for the head's layout check",
    ),
    Step(Phase.REGISTRY, Nodes.DRIVER_NODE, lambda a: a.judges.write_registry(a.node_topo)),
    Step(Phase.CANARIES, Nodes.DRIVER_NODE, lambda a: a.judges.run_canaries(a.node_topo)),
)
RUN_STEPS: tuple[Step, ...] = (
    Step(Phase.DRIVER, Nodes.ALL, Agent._drive, detail=Agent._driver_detail),
    Step(Phase.COMPLETE, Nodes.ALL, Agent._complete),
    Step(Phase.ACKNOWLEDGE, Nodes.ALL, Agent._acknowledge),
)
