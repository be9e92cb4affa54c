"""This node's devices and its placement record: the two placed steps that are the lifecycle's own
logic (the others are the runtimes' methods)."""

from __future__ import annotations

from agent.coord.context import RunContext
from agent.coord.topology import Topology
from agent.preflight.runtime import PreflightRuntime
from agent.ray.runtime import exported_ray_address
from schemas import FailureKind, names

__all__ = ["check_devices", "write_placement"]


def check_devices(ctx: RunContext, topo: Topology) -> str:
    """This node sees the GPUs its planned node has: a CPU pool's node none, every other the run's capacity."""
    devices = ctx.visible_devices
    need = topo.node.gpus
    if len(devices) != need:
        where = f"pool {topo.node.pool}'s gpus_per_node" if topo.node.pool else "gpus_per_replica"
        raise ctx.fail(
            FailureKind.PLACEMENT,
            f"rank {ctx.rank} sees {len(devices)} GPUs "
            f"(CUDA_VISIBLE_DEVICES={','.join(devices) or 'unset'}) but the plan needs "
            f"{where}={need} on node {topo.node.index}; fix the allocation or the spec",
        )
    return f"{len(devices)} GPU(s) visible"


def write_placement(ctx: RunContext, topo: Topology, preflight: PreflightRuntime) -> str:
    """placement-RANK.json, once judge devices are seen kept out of Ray's."""
    node = topo.node
    vis = ctx.visible_devices
    ray_mask = {vis[i] for i in node.ray_devices}
    for name, devs in node.judge_devices.items():
        if ray_mask & {vis[i] for i in devs}:
            raise ctx.fail(FailureKind.PLACEMENT, f"judge {name}'s devices overlap Ray's on node {node.index}")
    # What the job exported as the Ray head's address, as this node's step sees it (seed 001).
    exported = exported_ray_address(ctx.config.ray.name) if ctx.config.ray.enabled else None
    fields = topo.placement_fields(
        ctx.address, vis, ctx.filesystem, gpus=preflight.placement_gpus(), ray_address_exported=exported
    )
    ctx.run.write_artifact(names.placement(ctx.rank), ctx.writer, fields)
    return ""
