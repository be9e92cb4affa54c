"""Ray on one node, as lifecycle steps: start (head or worker, ports on probation, retried), the
head's readiness gate (`ray-layout.json`), and Ray's session logs kept at teardown.

Like the judge runtime it sees the run context and, after plan agreement, the topology; never
the Agent itself. What starting Ray produces (the GCS address, the temp dir) it keeps: the
readiness gate, the driver's environment and the teardown read it from here.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Mapping

from agent.coord.context import RunContext
from agent.coord.topology import Topology
from agent.ground import clock
from agent.ground.waits import poll_until
from agent.proc import collective_hook, start_slots
from agent.proc.supervisor import ExitPolicy, child_env
from agent.ray import _large_cluster as large_cluster
from agent.ray import _logs as ray_logs
from agent.ray import node as ray_node
from schemas import DriverEnv, FailureKind, names, records
from schemas.safe_io import RunDirError

__all__ = [
    "RAY_START_ATTEMPTS",
    "RAY_UP_MIN_WAIT_S",
    "RAY_UP_POLL_S",
    "RayRuntime",
    "exported_ray_address",
    "start_failure_cause",
]

RAY_START_ATTEMPTS = 3
RAY_UP_MIN_WAIT_S = 30.0  # a node may come up slowly on a loaded machine, even past startup_timeout
RAY_UP_POLL_S = 0.2
LOG_TAIL_BYTES = 64 * 1024  # where a failed `ray start` left its traceback


def start_failure_cause(log_tail: str) -> str:
    """Why `ray start` kept ending: the exception its log ends in, quoted, when it raised one (a
    missing package, a refused flag); the likely causes only when the log says nothing better."""
    raised = ray_node.traceback_exception(log_tail)
    if raised:
        return f"its log ends in {raised!r}"
    return "a port taken by another process, or Ray's raylet missing its registration wait on a busy host"


def exported_ray_address(name: str) -> str | None:
    """The Ray head's host:port the job exported to every node (GYM_RAY_ADDRESS_<NAME>, seed 001: the
    rendered Slurm job does), or None where the head picks its own port (local, Beaker, SkyPilot)."""
    return os.environ.get(DriverEnv.ray_address(name)) or None


class RayRuntime:
    """The Ray steps of one agent."""

    def __init__(self, ctx: RunContext, replicas: int, probe_log_fd: int) -> None:
        self.ctx = ctx
        self.replicas = replicas
        self.probe_log_fd = probe_log_fd  # the readiness probe's stderr: the agent's own log
        self.gcs_address = ""  # the head picks it; a worker reads it from ray-head.json
        self.rendezvous_port: int | None = None  # this node's block's spare port, once Ray started here
        self.temp_dir = ""  # Ray's local temp dir, once this node starts Ray
        self._extra_env: dict[str, str] = {}
        self.ray_nodes = len(ctx.plan.ray_nodes)
        self.large = large_cluster.is_large(self.ray_nodes, ctx.config.ray.large_cluster_nodes)
        self.settings: dict[str, str] = {}  # the large-cluster RAY_* variables this node started with
        self._rng = random.Random()
        self.exits: list[str] = []  # why each `ray start` that ended on probation ended
        self.slot_waited = 0.0  # seconds waited for the host's start slots (start_slots.py)
        self.ungated = ""  # why the last start that went without a slot did

    # -- ray_start -------------------------------------------------------------------------------

    def role(self, topo: Topology) -> str:
        return "head" if topo.is_head else f"worker of {topo.head_address}"

    def start(self, topo: Topology, extra_env: Mapping[str, str] | None = None) -> str:
        """Start this node's Ray; ``extra_env`` joins its environment (and so every Ray worker's)."""
        ctx = self.ctx
        self._extra_env = dict(extra_env or {})
        ray = ctx.config.ray
        if ray.dashboard and topo.is_head:
            self._check_dashboard()
        exported = exported_ray_address(ray.name)
        fixed = self._fixed_head_port(exported) if topo.is_head and exported else None
        self.temp_dir = ray_node.short_temp_dir()
        ctx.reaper.temp_dir(self.temp_dir)  # removed by the reaper if we are SIGKILLed
        if not topo.is_head:
            self._await_head(exported)
        t0 = clock.mono()
        attempt, ports = self._start_on_probation(topo, exported, fixed)
        if topo.is_head:
            self._publish_head(ports)
        took = f"up in {clock.mono() - t0:.1f} s"
        if attempt > 1:
            took += f" at start {attempt} ({'; '.join(self.exits)})"
        if self.slot_waited >= 1.0:
            took += f", of which {self.slot_waited:.1f} s waiting for the host's Ray start slot"
        if self.ungated:
            took += f"; started without a start slot: {self.ungated}"
        return took + (f"; large-cluster settings ({self.ray_nodes} Ray nodes)" if self.large else "")

    def _check_dashboard(self) -> None:
        """The head serves Ray's dashboard only when this node's Ray can: fail before starting."""
        ctx = self.ctx
        missing = ray_node.dashboard_missing()
        if missing:
            raise ctx.fail(
                FailureKind.PLACEMENT,
                f"ray.dashboard = true but this node's Ray cannot serve it ({missing}); install "
                "ray[default] in the image (pip install 'gym-agent[dashboard]') or set ray.dashboard = false",
            )

    def _await_head(self, exported: str | None) -> None:
        """A worker waits for the head's address (ray-head.json), which must be the one the job
        exported, if it exported one."""
        ctx = self.ctx
        ctx.wait_startup("the Ray head's address", self._head_known)
        if exported and exported != self.gcs_address:
            raise ctx.fail(
                FailureKind.PLACEMENT,
                f"the Ray head bound {self.gcs_address} (ray-head.json), but the job exported "
                f"{DriverEnv.ray_address(ctx.config.ray.name)}={exported}: the job's steps would reach another address",
            )
        self._await_head_answer()

    def _await_head_answer(self) -> None:
        """Seed 001: a worker joins only once the head answers (a head still starting does not
        break it); within the startup deadline, else the run fails naming the head and its last
        answer. Asked by connecting to its GCS (ray_node.head_answers says why not `ray status`)."""
        ctx = self.ctx
        last: list[str] = []

        def answers() -> bool:
            got = ray_node.head_answers(self.gcs_address)
            if got is not None:
                last[:] = [got]
            return got is None

        progress = ctx.progress(
            lambda left: f"waiting for the Ray head at {self.gcs_address} to answer; {left:.0f} s left"
        )
        if not poll_until(answers, deadline=ctx.deadline, interval=1.0, signal=ctx.signal, progress=progress):
            raise ctx.fail(
                FailureKind.STARTUP_TIMEOUT,
                f"the Ray head at {self.gcs_address} (ray-head.json) never answered node {ctx.rank} "
                f"({ctx.address}) within startup_timeout {ctx.config.coordination.startup_timeout:g}s; last: "
                f"{last[0] if last else 'not asked'}",
            )

    def _start_on_probation(
        self, topo: Topology, exported: str | None, fixed: int | None
    ) -> tuple[int, ray_node.RayPorts]:
        """`ray start` until one stays up, each time on new ports (the fixed head block excepted);
        fails the run after the last attempt. Returns the attempt that stayed up and its ports."""
        ctx = self.ctx
        ray = ctx.config.ray
        attempts = large_cluster.RETRY_ATTEMPTS if self.large else RAY_START_ATTEMPTS
        for attempt in range(1, attempts + 1):
            if self.large and not topo.is_head:
                self._join_backoff(attempt)
            if fixed is not None:
                # The job fixed the head's block before the head started; there is no other to try.
                ports = ray_node.hold_fixed_block(fixed, f"{DriverEnv.ray_address(ray.name)}={exported}")
            else:
                ports = ray_node.pick_ports(
                    ctx.run.path.name, ctx.rank + (attempt - 1) * self.replicas, self.replicas * attempts
                )
            if topo.is_head:
                self.gcs_address = f"{ctx.address}:{ports.gcs}"
            if self._spawn_in_slot(topo, ports):
                self.rendezvous_port = ports.spare
                return attempt, ports
        log = names.ray_log(ctx.rank)
        raise ctx.fail(
            FailureKind.CHILD_EXIT,
            f"ray start ended before its node was up {attempts} times ({'; '.join(self.exits)}): "
            + start_failure_cause(self._log_tail(log)),
            log=log,
        )

    def _log_tail(self, log: str) -> str:
        run = self.ctx.run
        size = run.size_of(log) or 0
        try:
            return run.read_from(log, max(0, size - LOG_TAIL_BYTES), LOG_TAIL_BYTES).decode("utf-8", "replace")
        except (OSError, RunDirError):
            return ""

    def _publish_head(self, ports: ray_node.RayPorts) -> None:
        """The head's record for the workers (ray-head.json), and where its dashboard is."""
        ctx = self.ctx
        ctx.run.write_artifact(
            names.RAY_HEAD,
            ctx.writer,
            records.ray_head_fields(
                gcs_address=self.gcs_address,
                ray_nodes=max(1, self.ray_nodes),
                large_cluster=self.large,
                settings=self.settings,
            ),
        )
        if ctx.config.ray.dashboard:
            ctx.out(f"Ray dashboard: http://{ctx.address}:{ports.dashboard}")

    def _join_backoff(self, attempt: int) -> None:
        """A large cluster's worker spreads its start out (the first) and backs off (the others),
        never past the startup deadline's last seconds; a failure meanwhile ends the wait."""
        ctx = self.ctx
        left = ctx.deadline - clock.mono() - RAY_UP_MIN_WAIT_S
        delay = min(large_cluster.join_delay(attempt, self.ray_nodes, self._rng), max(0.0, left))
        if delay > 0:
            ctx.signal.wait(delay)
            ctx.signal.raise_if_set()

    def _fixed_head_port(self, exported: str) -> int:
        """The port of the head's host:port the job exported (seed 001), which must name this node:
        the head then binds exactly that address."""
        ctx = self.ctx
        var = DriverEnv.ray_address(ctx.config.ray.name)
        host, _, port = exported.rpartition(":")
        if not port.isdigit() or host != ctx.address:
            raise ctx.fail(
                FailureKind.PLACEMENT,
                f"the job exported {var}={exported}, but the Ray head runs on this node (rank {ctx.rank}, the "
                f"driver's), whose address is {ctx.address}: the job script must name the driver's node and a port",
            )
        return int(port)

    def _head_known(self) -> bool:
        if not self.ctx.listed(names.RAY_HEAD):
            return False
        doc = self.ctx.run.read_json(names.RAY_HEAD)
        if not doc or doc.get("fingerprint") != self.ctx.config.fingerprint:
            return False
        self.gcs_address = str(doc["gcs_address"])
        return True

    def _resources(self, topo: Topology) -> dict[str, float]:
        pool = topo.node.pool
        resources = self.ctx.config.ray.resources
        if pool and pool in resources:
            return {k: float(v) for k, v in resources[pool].items()}
        return {}

    def _spawn_in_slot(self, topo: Topology, ports: ray_node.RayPorts) -> bool:
        """`_spawn` holding one of the host's Ray start slots (start_slots.py), so that the nodes on
        one host do not all miss Ray's registration wait together; waiting for one ends where the
        start still keeps its minimum wait before the deadline."""
        ctx = self.ctx

        def wait(seconds: float) -> None:
            ctx.signal.wait(seconds)
            ctx.signal.raise_if_set()

        slot = start_slots.acquire("ray", deadline=ctx.deadline - RAY_UP_MIN_WAIT_S, wait=wait)
        self.slot_waited += slot.waited
        self.ungated = slot.why or self.ungated
        try:
            return self._spawn(topo, ports)
        finally:
            slot.release()

    def _spawn(self, topo: Topology, ports: ray_node.RayPorts) -> bool:
        """Start Ray on probation until every port it should bind accepts connections. Ports are
        picked and then bound by Ray: if another process took one, Ray exits during probation,
        which is retried with new ports instead of failing the run. A fixed probation time is
        not enough: on a loaded host a node can take several seconds to bind its last port."""
        ctx = self.ctx
        spec = self._node_spec(topo, ports)
        env = self._node_env(topo)
        early: list[int] = []
        log = names.ray_log(ctx.rank)
        ray_node.forget_started(self.temp_dir)
        ray = ctx.config.ray
        argv = ray_node.ray_start_argv(spec, image_ray=ray.container is not None)
        # Seed 001: [ray] env, pre_command and container, as for every service.
        proc = ctx.service_process("ray", ray, argv, env.get("CUDA_VISIBLE_DEVICES"))
        env.update(proc.env)
        group = ctx.supervisor.start(
            "ray-head" if topo.is_head else "ray-worker",
            list(proc.argv),
            env=env,
            log_fd=ctx.run.open_log(log),
            policy=ExitPolicy(FailureKind.CHILD_EXIT, log, on_exit=early.append),
            term_leader_only=True,
        )
        if not self._wait_up(topo, ports, early, log):
            return False
        ctx.supervisor.set_policy(group, ExitPolicy(FailureKind.CHILD_EXIT, log))
        return True

    def _node_spec(self, topo: Topology, ports: ray_node.RayPorts) -> ray_node.RayNodeSpec:
        ctx = self.ctx
        ray = ctx.config.ray
        return ray_node.RayNodeSpec(
            is_head=topo.is_head,
            address=ctx.address,
            head_address=self.gcs_address,
            ports=ports,
            num_gpus=topo.node.ray_gpus,
            num_cpus=ray.num_cpus,
            object_store_memory=ray.object_store_memory,
            temp_dir=self.temp_dir,
            resources=self._resources(topo),
            extra_args=ray.extra_args,
            dashboard=ray.dashboard and topo.is_head,
            client_server=topo.is_head and ray_node.ray_client_installed(),
        )

    def _node_env(self, topo: Topology) -> dict[str, str]:
        """`ray start`'s environment, which every Ray worker on this node inherits."""
        ctx = self.ctx
        vis = ctx.visible_devices
        env = ray_node.ray_env(child_env({}), ",".join(vis[i] for i in topo.node.ray_devices), self.temp_dir)
        if self.large:
            wanted = large_cluster.settings(topo.is_head)
            self.settings = large_cluster.apply(env, wanted, {**os.environ, **ctx.config.launch.env})
        # Seed 001: the head's host:port is in the job's environment on every Ray node, so a task or
        # actor anywhere in the cluster finds it as GYM_RAY_ADDRESS_<NAME> (the driver gets it too).
        env[DriverEnv.ray_address(ctx.config.ray.name)] = self.gcs_address
        # As open-instruct's MILES launcher starts Ray: Ray workers on this node inherit these.
        env[DriverEnv.RAY_NODE_IP_ADDRESS] = ctx.address
        env[DriverEnv.MILES_REPLICA_RANK] = str(ctx.rank)
        env[DriverEnv.MILES_REPLICA_COUNT] = str(self.replicas)
        env.update(self._extra_env)
        if ctx.local_dir is not None:  # a task or actor that imports agent.driver_api arms the fallback dump
            env[DriverEnv.STACK_DUMP_DIR] = ctx.local_dir
        # ... and, with [driver] collective_trace, answers for its collectives on a hang.
        env.update(collective_hook.env(ctx.config.driver.collective_trace, ctx.local_dir, {**os.environ, **env}))
        return env

    def _wait_up(self, topo: Topology, ports: ray_node.RayPorts, early: list[int], log: str) -> bool:
        """Probation: True once the node is up, False when `ray start` exited first (`early`
        holds its exit code; why is kept in `exits`); fails the run when neither comes in time."""
        ctx = self.ctx
        t0 = clock.mono()
        limit = max(RAY_UP_MIN_WAIT_S, ctx.deadline - t0)
        ports_open = False

        def up_or_exited() -> bool:
            # Up means registered, not only listening: Ray's `ray start` gives its raylet a fixed
            # 30 s to register with the GCS and exits (taking the node down) when a busy host or
            # GCS makes it miss that; such an exit stays on probation and is started again.
            nonlocal ports_open
            if early:
                return True
            ports_open = ports_open or ray_node.ray_is_up(ctx.address, ports, topo.is_head)
            return ports_open and ray_node.ray_started(self.temp_dir)

        if not poll_until(up_or_exited, deadline=t0 + limit, interval=RAY_UP_POLL_S, signal=ctx.signal):
            what = "register with the GCS" if ports_open else f"open its ports ({ports.gcs}-{ports.max_worker})"
            raise ctx.fail(FailureKind.STARTUP_TIMEOUT, f"Ray did not {what} within {limit:.0f}s", log=log)
        if early:
            when = "after its ports opened, before it registered" if ports_open else "before its ports opened"
            self.exits.append(f"exit code {early[0]} {when}")
            return False
        return True

    # -- readiness -------------------------------------------------------------------------------

    def readiness(self, topo: Topology) -> str:
        """The head checks Ray's live nodes against the plan and writes ray-layout.json."""
        ctx = self.ctx
        plan = ctx.plan
        peers = topo.peers
        # Exactly the nodes that join: the head and the nodes of the spanned pools.
        expected = {peers[i].address: float(plan.nodes[i].ray_gpus) for i in plan.ray_nodes}
        t0 = clock.mono()
        remaining = max(5.0, ctx.deadline - clock.mono())
        try:
            live = ray_node.probe_live_nodes(
                self.gcs_address,
                ctx.address,
                len(expected),
                remaining,
                self.probe_log_fd,
                ctx.signal.is_set,
                progress=ctx.out,
                progress_every=ctx.config.coordination.progress_interval,
            )
        except (RuntimeError, ValueError) as exc:
            ctx.signal.raise_if_set()
            if clock.mono() >= ctx.deadline:  # the one startup deadline cut the probe short, not Ray
                raise ctx.fail(
                    FailureKind.STARTUP_TIMEOUT,
                    f"Ray's live nodes not read within startup_timeout {ctx.config.coordination.startup_timeout:g}s "
                    f"(counted from agent start; the probe: {exc})",
                    log=names.ray_log(ctx.rank),
                ) from None
            raise ctx.fail(
                FailureKind.LAYOUT, f"could not read Ray's live nodes: {exc}", log=names.ray_log(ctx.rank)
            ) from None
        check = ray_node.compare_layout(expected, live)
        ctx.run.write_artifact(
            names.RAY_LAYOUT,
            ctx.writer,
            records.ray_layout_fields(
                head_address=ctx.address,
                ray_address=self.gcs_address,
                expected=check.expected,
                actual=check.actual,
                live_nodes=check.live_nodes,
                passed=check.passed,
                problems=check.problems,
                waited_s=clock.mono() - t0,
            ),
        )
        if not check.passed:
            raise ctx.fail(FailureKind.LAYOUT, "Ray's live layout differs from the plan: " + "; ".join(check.problems))
        return ""

    # -- teardown --------------------------------------------------------------------------------

    def keep_session_logs(self) -> None:
        """Ray's own logs (raylet, GCS, workers) are the evidence of a Ray-side death: keep them
        in the run directory before the temp dir goes (after Ray's process groups stopped)."""
        if not self.temp_dir:
            return
        ctx = self.ctx
        where = names.ray_session_dir(ctx.rank)
        kept = ray_logs.keep(self.temp_dir, ctx.run, where, ctx.config.ray.session_log_bytes)
        if kept.files:
            ctx.out(f"kept {kept.describe()} of Ray's session logs in {where}/")
        shutil.rmtree(self.temp_dir, ignore_errors=True)
