"""The steps before the topology exists, which every node runs and which produce it: rendezvous
(every rank's address record) and plan agreement (same spec everywhere, node order, this node)."""

from __future__ import annotations

import os

from agent.coord.context import RunContext
from agent.coord.identity import Identity
from agent.coord.rendezvous import Peer, agree, gather, node_order
from agent.coord.topology import Topology
from agent.lifecycle._doorbell_link import DoorbellLink
from agent.lifecycle._phase_log import PhaseLog
from agent.lifecycle._running import Running
from agent.lifecycle.steps import AGREEMENT_STEPS
from schemas import FailureKind, JobEnv, credentials

__all__ = ["agree_plan", "reach_agreement", "rendezvous"]


def reach_agreement(running: Running, ident: Identity, bell: DoorbellLink, log: PhaseLog) -> Topology:
    """Walk the agreement steps (their phase lines); the topology they agree on."""
    meet, agreement = AGREEMENT_STEPS
    log.begin(meet.phase, f"rank {ident.rank}/{ident.count} at {ident.address}")
    peers = rendezvous(running, ident, bell)
    log.end()
    log.begin(agreement.phase)
    topo = agree_plan(running.ctx, ident, peers)
    log.node_index, log.address = topo.node.index, ident.address
    log.end(detail=f"node {topo.node.index} of {running.ctx.plan.replicas}; head {topo.head_address}")
    return topo


def rendezvous(running: Running, ident: Identity, bell: DoorbellLink) -> list[Peer]:
    """Every rank's address record (ours was claimed before anything was written), then liveness
    watches its peers and the doorbell knows them."""
    _check_host_allowed(running.ctx, ident.hostname)
    _check_environment(running.ctx)
    peers = gather(running.ctx, ident.count, seen=bell.peers_so_far)
    running.liveness.start_watching()
    bell.peers_known(peers, running.liveness, running.ctx.reaper)
    return peers


def _check_host_allowed(ctx: RunContext, host: str) -> None:
    """launch.hostnames is the one shared allowlist: a replica on another host fails the run."""
    allowed = ctx.config.hostnames
    if allowed and host not in allowed and host.split(".")[0] not in allowed:
        raise ctx.fail(
            FailureKind.PLACEMENT,
            f"host {host!r} is not in launch.hostnames ({', '.join(allowed)}); run on a listed host or add "
            "it to the allowlist",
        )


def _check_environment(ctx: RunContext) -> None:
    """Every variable the spec takes from the job's environment is set, before any process starts
    (a missing one would fail the driver or Ray far later, or start them with an empty secret)."""
    referenced = ctx.config.environment_references()
    missing = {var: key for var, key in referenced.items() if var not in os.environ}
    if missing:
        raise ctx.fail(
            FailureKind.ENVIRONMENT,
            "not set in the job's environment: "
            + ", ".join(f"{var} (referenced by {key})" for var, key in missing.items())
            + "; export it where the job is submitted, or name it in [launch] secrets",
        )
    # An argv's values reach a command line (stacks read it); [driver] env's never do, and hold pool lists.
    credentials.hold(os.environ[var] for var, key in referenced.items() if not key.startswith("driver.env."))


def agree_plan(ctx: RunContext, ident: Identity, peers: list[Peer]) -> Topology:
    """Same fingerprint everywhere, the nodes in order, this replica's planned node."""
    plan = ctx.plan
    phase = ctx.phase()
    agree(peers, ctx.config.fingerprint, phase)
    ordered = node_order(peers, phase, [n.pool for n in plan.nodes])
    if len(ordered) != plan.replicas:
        raise ctx.fail(
            FailureKind.PLAN_MISMATCH,
            f"{len(ordered)} replicas started but the plan has {plan.replicas}; start exactly {plan.replicas} replicas",
        )
    index = next(i for i, p in enumerate(ordered) if p.rank == ident.rank)
    planned = plan.nodes[index].pool
    if ident.pool is not None and planned is not None and ident.pool != planned:
        raise ctx.fail(
            FailureKind.PLACEMENT,
            f"this node's job step runs pool {ident.pool!r} ({JobEnv.POOL}) but it owns planned node "
            f"{index}, of pool {planned!r}: the allocation's pools do not match [pools.*] nodes",
        )
    return Topology(plan.nodes[index], tuple(ordered), plan.driver_node, plan.ray_nodes)
