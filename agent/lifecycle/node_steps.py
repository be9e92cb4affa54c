"""The steps after plan agreement, on one node: what runs once the topology exists.

`Running` is what run_lifecycle starts before the first step (the run context, the reaper, the
liveness thread, the judge, Ray and driver runtimes); plan agreement adds the topology, and the
two make a `NodeSteps`, whose methods are the bodies steps.py names for the placed and run
steps. Each returns the detail printed when its phase ends.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from agent.coord.context import RunContext
from agent.coord.liveness import Liveness
from agent.coord.topology import Topology
from agent.judges.runtime import JudgeRuntime
from agent.lifecycle.driver import DriverRuntime
from agent.preflight.runtime import PreflightRuntime
from agent.ray.runtime import RayRuntime, exported_ray_address
from schemas import FailureKind, names


@dataclass(frozen=True)
class Running:
    """What exists once the lifecycle runs: started by run_lifecycle before the first step and
    handed to every step and to the teardown."""

    ctx: RunContext
    reaper: subprocess.Popen[str]
    liveness: Liveness
    judges: JudgeRuntime
    ray: RayRuntime
    driver: DriverRuntime
    preflight: PreflightRuntime


@dataclass(frozen=True)
class NodeSteps:
    """The placed and run steps of one node (the method names are steps.py's)."""

    running: Running
    topo: Topology

    # -- startup, after plan agreement -------------------------------------------------------------

    def check_data(self) -> str:
        return self.running.judges.check_data()

    def check_devices(self) -> str:
        ctx = self.running.ctx
        devices = ctx.visible_devices
        # The node's own GPUs: a CPU pool's node has none, every other node the run's capacity.
        need = self.topo.node.gpus
        if len(devices) != need:
            where = f"pool {self.topo.node.pool}'s gpus_per_node" if self.topo.node.pool else "gpus_per_replica"
            raise ctx.fail(
                FailureKind.PLACEMENT,
                f"rank {ctx.rank} sees {len(devices)} GPUs "
                f"(CUDA_VISIBLE_DEVICES={','.join(devices) or 'unset'}) but the plan needs "
                f"{where}={need} on node {self.topo.node.index}; fix the allocation or the spec",
            )
        return f"{len(devices)} GPU(s) visible"

    def preflight(self) -> str:
        return self.running.preflight.run(self.topo)

    def write_placement(self) -> str:
        ctx = self.running.ctx
        topo = self.topo
        node = topo.node
        vis = ctx.visible_devices
        ray_mask = {vis[i] for i in node.ray_devices}
        for name, devs in node.judge_devices.items():
            if ray_mask & {vis[i] for i in devs}:
                raise ctx.fail(FailureKind.PLACEMENT, f"judge {name}'s devices overlap Ray's on node {node.index}")
        # What the job exported as the Ray head's address, as this node's step sees it (seed 001).
        exported = exported_ray_address(ctx.config.ray.name) if ctx.config.ray.enabled else None
        fields = topo.placement_fields(
            ctx.address,
            vis,
            ctx.filesystem,
            gpus=self.running.preflight.placement_gpus(),
            ray_address_exported=exported,
        )
        ctx.run.write_artifact(names.placement(ctx.rank), ctx.writer, fields)
        return ""

    def start_judges(self) -> str:
        return self.running.judges.start_local(self.topo)

    def ray_role(self) -> str:
        return self.running.ray.role(self.topo)

    def start_ray(self) -> str:
        # Ray's environment carries the judges' hand-off, so the judges' endpoints come first.
        return self.running.ray.start(self.topo, self.running.judges.ray_env(self.topo))

    def judge_health(self) -> str:
        return self.running.judges.wait_local_healthy()

    def readiness_gate(self) -> str:
        return self.running.ray.readiness(self.topo)

    def write_registry(self) -> str:
        return self.running.judges.write_registry(self.topo)

    def run_canaries(self) -> str:
        return self.running.judges.run_canaries(self.topo)

    # -- running -----------------------------------------------------------------------------------

    def driver_detail(self) -> str:
        return self.running.driver.detail(self.topo)

    def drive(self) -> str:
        return self.running.driver.run(self.topo)

    def complete(self) -> str:
        return self.running.driver.complete(self.topo)

    def acknowledge(self) -> str:
        detail = self.running.driver.acknowledge()
        self.running.liveness.stop_watching()  # peers may now exit: their silence is expected
        return detail
