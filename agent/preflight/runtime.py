"""The preflight as a lifecycle step (after plan agreement, before Ray and the judges start), and the
GPU residue check of the teardown. Like the judge and Ray runtimes it sees the run context and the
topology, never the Agent; the peers' probe is handed in (it goes through the agent's doorbell).

A failed check whose mode is "fail" fails the run with kind `preflight`, naming the node, the checks
and what to change; the failure rings the peers like any other (the doorbell is bound and armed).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from agent.coord.context import RunContext
from agent.coord.doorbell_probe import Probed
from agent.coord.rendezvous import Peer
from agent.coord.topology import Topology
from agent.ground import clock
from agent.preflight._residue import residue
from agent.preflight._run import PreflightInputs, Report, run_preflight, socket_env
from launch.spec.resolve import RUNTIME_PREFIX
from schemas import FailureKind, names

__all__ = ["PROBE_TIMEOUT_S", "PreflightRuntime", "ProbePeers", "driver_env_values"]

PROBE_TIMEOUT_S = 30.0  # every peer's doorbell answers within this (or the startup deadline's rest)

# (peers, timeout) -> each peer's answer; None when this agent's doorbell is off (nothing to sign with).
ProbePeers = Callable[[Sequence[Peer], float], "list[Probed] | None"]


def driver_env_values(env: dict[str, str]) -> dict[str, str]:
    """[driver] env as the driver gets it (a `runtime:VAR` value is VAR of the job's environment)."""
    out = {}
    for key, value in env.items():
        if value.startswith(RUNTIME_PREFIX):
            var = value[len(RUNTIME_PREFIX) :]
            if var not in os.environ:
                continue  # the driver step names that problem itself
            value = os.environ[var]
        out[key] = value
    return out


class PreflightRuntime:
    def __init__(
        self,
        ctx: RunContext,
        *,
        hostname: str,
        scheduler_node: str | None,
        probe: ProbePeers,
        probe_off: Callable[[], str] = lambda: "",
    ) -> None:
        self.ctx = ctx
        self.hostname = hostname
        self.scheduler_node = scheduler_node
        self._probe = probe
        self._probe_off = probe_off  # why peers cannot be probed now (the doorbell is off), or ""
        self.report: Report | None = None

    def inputs(self, topo: Topology) -> PreflightInputs:
        ctx = self.ctx
        node = topo.node
        vis = ctx.visible_devices
        judges = (d for devs in node.judge_devices.values() for d in devs)
        planned = sorted({*node.ray_devices, *node.policy_devices, *judges})
        devices = tuple((d, vis[d]) for d in planned if d < len(vis))
        env = socket_env(
            (os.environ, "the job's environment"),
            (ctx.config.launch.env, "[launch] env"),
            (driver_env_values(dict(ctx.config.driver.env)), "[driver] env"),
        )
        root = ctx.run.path.parent.parent  # OUTPUT/cluster/UUID
        started_wall = clock.wall() - (clock.mono() - (ctx.deadline - ctx.config.coordination.startup_timeout))
        peers = [p for p in topo.peers if p.rank != ctx.rank]

        def probe() -> list[Probed]:
            left = ctx.deadline - clock.mono()
            return self._probe(peers, max(1.0, min(PROBE_TIMEOUT_S, left))) or []

        off = self._probe_off()
        can_probe = bool(peers) and not off
        note = "no peer to probe" if not peers else f"peers not probed: {off}"
        return PreflightInputs(
            config=ctx.config.launch.preflight,
            address=ctx.address,
            hostname=self.hostname,
            node_index=node.index,
            devices=devices,
            env=env,
            paths=(("output root", root), ("checkpoint directory", ctx.run.path / names.CHECKPOINTS_DIR)),
            job_started=started_wall,
            probe=probe if can_probe else None,
            probe_note=note,
            scheduler_node=self.scheduler_node,
        )

    def run(self, topo: Topology) -> str:
        ctx = self.ctx
        report = run_preflight(self.inputs(topo))
        self.report = report
        ctx.run.write_artifact(names.preflight(ctx.rank), ctx.writer, report.fields())
        for line in report.lines():
            ctx.out(line)
        ctx.signal.raise_if_set()  # a peer's failure heard meanwhile comes first (its port may be closed)
        if not report.passed:
            raise ctx.fail(
                FailureKind.PREFLIGHT,
                report.cause(),
                checks=tuple(str(r.check) for r in report.failed),
                log=names.agent_log(ctx.rank),
            )
        self._wait_for_peers(len(topo.peers))
        return report.detail()

    def _wait_for_peers(self, count: int) -> None:
        """No node goes on to start Ray or a judge before every node's preflight passed: an unfit
        node fails the run while nothing but the agents runs anywhere. A peer whose check failed
        writes its failure record (and rings): that ends this wait."""
        ctx = self.ctx
        passed = {ctx.rank}

        def all_passed() -> bool:
            listing = set(ctx.run.listdir())
            for rank in range(count):
                name = names.preflight(rank)
                if rank not in passed and name in listing and (ctx.run.read_json(name) or {}).get("passed") is True:
                    passed.add(rank)
            return len(passed) == count

        ctx.wait_startup(
            "every node's preflight",
            all_passed,
            lambda left: f"{len(passed)}/{count} nodes passed preflight; {left:.0f} s left",
        )

    def placement_gpus(self) -> list[dict[str, Any]]:
        """Each planned GPU's NVML index and UUID, for the placement record ([] without NVML)."""
        return [g.naming() for g in self.report.gpus] if self.report is not None else []

    def residue_fields(self) -> dict[str, Any]:
        """cleanup-RANK.json's `gpu_residue`, after every group stopped ({} when all came back)."""
        if self.report is None or not self.report.gpus:
            return {}
        left = residue(self.report.gpus, self.ctx.config.launch.preflight.gpu_release_timeout)
        for g in left:
            pids = ", ".join(str(p["pid"]) for p in g["pids"]) or "none visible"
            self.ctx.out(
                f"GPU {g['index']} ({g['uuid']}) still holds memory {g['waited_s']:.0f} s after teardown "
                f"(pids {pids}): the next job on this node would inherit it"
            )
        return {"gpu_residue": left} if left else {}
