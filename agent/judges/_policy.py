"""The policy service at run time (seed 001): its engine on each node the plan gives it.

Started beside the managed judges, gated with them (the engine's ``/health``, then ``/v1/models``
listing the served name) and probed for the rest of the run like a judge: the same supervisor (its
own process group, ended whole at the teardown), the same health registry and the same revision
proof. It is not graded: no gateway, no canaries, no registry entry. The driver runs on the
engine's node 0 and gets its URL (``GYM_POLICY_URL``).
"""

from __future__ import annotations

import os
import shutil
from functools import partial
from typing import TYPE_CHECKING

from agent.coord.context import RunContext
from agent.coord.topology import Topology
from agent.ground import clock
from agent.ground.failure import Failure
from agent.ground.waits import poll_until
from agent.judges._health_gate import health_deadline
from agent.judges._prepared import prove_revision
from agent.proc import tempdirs
from agent.proc.segments import group_segments
from agent.proc.supervisor import ExitPolicy, child_env
from launch.spec.policy_argv import PolicyNode, policy_command, policy_url
from launch.spec.sections import PolicyConfig
from launch.spec.vllm_argv import ENGINE_PYTHON_ENV
from schemas import DriverEnv, FailureKind, names
from schemas.credentials import substitute

if TYPE_CHECKING:
    from agent.judges._engine_health import EngineHealthRegistry, EngineStatus
    from agent.proc.procgroup import ProcessGroup

__all__ = ["PolicyRuntime"]

ENGINE_ID = "policy"


class PolicyRuntime:
    """The policy service's part of one agent: nothing on a node the policy does not span."""

    def __init__(self, ctx: RunContext, health_failures: int) -> None:
        self.ctx = ctx
        self.health_failures = health_failures  # consecutive failed /health probes that fail the run, as a judge's
        self.group: ProcessGroup | None = None
        self.exits: list[int] = []
        self.url: str | None = None  # set once the engine is ready, on its node 0
        self.health: EngineHealthRegistry | None = None
        self._serves = False  # node 0: the engine's HTTP server (and the driver) is here
        self._started = 0.0
        self._log = names.policy_log(ctx.rank)
        self._base = ""
        self._tmp: str | None = None
        self.segments: set[str] = set()  # /dev/shm files the engine mapped (agent/proc/segments.py)
        self._last_check: str | None = None  # what the health check got last while starting

    @property
    def config(self) -> PolicyConfig | None:
        return self.ctx.config.managed_policy

    def start(self, topo: Topology) -> str:
        ctx, policy = self.ctx, self.config
        nodes = ctx.plan.policy_nodes
        if policy is None or topo.node.index not in nodes:
            return ""
        if policy.revision and policy.prepared_dir:
            proof = prove_revision(policy.prepared_dir, policy.revision)
            if not proof.ok:
                raise ctx.fail(FailureKind.CHILD_EXIT, f"policy: {proof.detail}")
        rank = nodes.index(topo.node.index)
        node = PolicyNode(rank, len(nodes), ctx.address, topo.peers[nodes[0]].address)
        cmd = policy_command(policy, node, python=os.environ.get(ENGINE_PYTHON_ENV) or None)
        vis = ctx.visible_devices
        devices = ",".join(vis[i] for i in topo.node.policy_devices)
        # "${runtime:NAME}" in extra_args: the value only in the exec, never in a record.
        proc = ctx.service_process("policy", policy, substitute(cmd.argv, os.environ), devices)
        # The engine's own temp files (vLLM's file:// rendezvous, its sockets) where the agent removes them.
        self._tmp = tempdirs.make(tempdirs.JUDGE_PREFIX)
        ctx.reaper.temp_dir(self._tmp)
        env = child_env({**dict(cmd.env), **proc.env, "CUDA_VISIBLE_DEVICES": devices, "TMPDIR": self._tmp})
        argv = list(proc.argv)
        self.group = ctx.supervisor.start(
            "policy",
            argv,
            env=env,
            log_fd=ctx.run.open_log(self._log),
            policy=ExitPolicy(FailureKind.CHILD_EXIT, self._log, on_exit=self.exits.append),
            term_leader_only=policy.backend == "vllm",  # as a vLLM judge: runtime.ENGINE_STOP_LEADER
        )
        self._started = clock.mono()
        self._serves = rank == 0
        self._base = policy_url(ctx.address, policy.port).removesuffix("/v1")
        where = f"node {rank} of {len(nodes)}" if len(nodes) > 1 else "one node"
        return f"policy server ({policy.backend}, {where})"

    def wait_ready(self) -> str:
        """The engine answers /health, then lists the served name on /v1/models; then probed like a
        judge for the rest of the run. Only node 0 serves HTTP: the others are supervised only."""
        ctx, policy = self.ctx, self.config
        if policy is None or self.group is None:
            return ""
        if not self._serves:
            self._supervise()
            return "policy engine node running"
        self.health = self._new_health_registry()
        epoch = self.health.register(ENGINE_ID, self._base, policy.health_path)
        deadline, bound = health_deadline(ctx, policy, self._started)
        ok = poll_until(
            partial(self._ready_once, epoch, policy.model or ""),
            deadline=deadline,
            interval=min(0.5, ctx.config.coordination.poll_interval),
            signal=ctx.signal,
            progress=ctx.progress(self._loading_line),
        )
        if not ok:
            from agent.judges._engine_health import health_check_cause

            url, where = self._base + policy.health_path, f"node {ctx.rank} ({ctx.address})"
            cause = health_check_cause(
                "the policy server", url, where, self._last_check, clock.mono() - self._started, bound
            )
            raise ctx.fail(FailureKind.STARTUP_TIMEOUT, cause, log=self._log)
        self._supervise()
        self.health.start()
        self.url = policy_url(ctx.address, policy.port)
        return f"policy ready at {self.url} after {clock.mono() - self._started:.0f} s"

    def _loading_line(self, left: float) -> str:
        return f"policy: loading, {clock.mono() - self._started:.0f} s; {left:.0f} s left"

    def _supervise(self) -> None:
        assert self.group is not None
        self.segments |= group_segments(self.group.session)
        self.ctx.supervisor.set_policy(self.group, ExitPolicy(FailureKind.CHILD_EXIT, self._log))

    def _ready_once(self, epoch: int, model: str) -> bool:
        if self.exits:
            child = self.group.name if self.group is not None else None
            raise self.ctx.fail(
                FailureKind.CHILD_EXIT,
                f"the policy server exited with code {self.exits[0]} before it was ready",
                log=self._log,
                exit_code=self.exits[0],
                child=child,
            )
        assert self.health is not None and self.config is not None
        result = self.health.probe(ENGINE_ID, epoch, self._base, self.config.health_path)
        if not result.ok:
            self._last_check = result.error
            return False
        if not _lists_model(self._base, model):
            self._last_check = f"a 2xx answer, but /v1/models does not list {model!r} yet"
            return False
        self.health.record(result)
        return True

    def _new_health_registry(self) -> EngineHealthRegistry:
        from agent.judges._engine_health import agent_registry, quarantine_cause

        ctx = self.ctx

        def quarantined(status: EngineStatus) -> None:
            cause = quarantine_cause("the policy server", status, self.health_failures)
            ctx.signal.trip(Failure(kind=FailureKind.CHILD_EXIT, cause=cause, phase=ctx.phase(), log=self._log))

        return agent_registry(ctx.config.coordination.heartbeat_interval, self.health_failures, quarantined)

    def stop(self) -> None:
        """Stop probing before the engine is stopped: its exit then is no health failure."""
        if self.group is not None:
            self.segments |= group_segments(self.group.session)  # the last look while it runs
        if self.health is not None:
            self.health.stop(timeout=5)
            self.health = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def driver_env(self) -> dict[str, str]:
        return {DriverEnv.POLICY_URL: self.url} if self.url is not None else {}


def _lists_model(base: str, model: str) -> bool:
    """``/v1/models`` answers and lists ``model``: the engine serves the name the driver will ask for."""
    import httpx

    try:
        got = httpx.get(f"{base}/v1/models", timeout=5.0)
        data = got.json().get("data") if got.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return False
    return isinstance(data, list) and any(isinstance(m, dict) and m.get("id") == model for m in data)
