"""What the run SHOULD look like: the plan recomputed from the recorded spec with `launch`.

The audit never trusts the agents' own idea of the plan; it recomputes it from spec.json, so
a replica that planned differently shows up as a mismatch. `launch` is the only planner: when
it rejects the spec, the audit falls back to describing what the placement records claim (and
says that checks against the plan were skipped). The spec is read only through the resolved
model, never as a raw table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from audit._load import LoadedRun
from audit._model import Finding
from audit._views import placements, ranks_of
from launch.spec.config import RunConfig
from launch.spec.errors import SpecError, UsageError
from launch.spec.load import resolved_from_dict
from launch.spec.plan import NodePlan as LaunchNodePlan
from launch.spec.plan import plan as make_plan
from launch.spec.sections import Binding, EvidenceConfig, LedgerConfig
from schemas import names

__all__ = ["NodePlan", "PlanView", "expected_plan"]


@dataclass(frozen=True)
class NodePlan:
    index: int
    trainer_gpus: int
    rollout_gpus: int
    ray_gpus: int
    ray_devices: tuple[int, ...]
    judges: Mapping[str, tuple[int, ...]]  # judge name -> local devices
    unused_devices: tuple[int, ...]
    pool: str | None = None  # the [pools.NAME] of this node (None: no pools, or unknown)


@dataclass(frozen=True)
class PlanView:
    source: Literal["launch", "artifacts"]
    replicas: int
    gpus_per_replica: int | None
    nodes: tuple[NodePlan, ...]
    driver_node: int | None
    bindings: tuple[Binding, ...]
    judge_modes: Mapping[str, str]  # every declared judge -> "managed" | "external"
    fingerprint: str | None  # the fingerprint launch computes for the recorded spec
    ray_nodes: tuple[int, ...] | None = None  # nodes that join Ray (None: unknown, every node)
    ray_enabled: bool = True  # `[ray] enabled = false`: no Ray, so no ray-layout.json is expected
    # Why no evidence of training is expected (`[driver] trains = false`, no trainer), or None.
    no_training: str | None = None
    # An evaluation run (no trainer, rollout engines): judged by its exit and its judges' replies.
    evaluation: bool = False
    evidence: EvidenceConfig | None = None  # `[driver.evidence]`, when the spec resolved
    unchecked_judges: frozenset[str] = frozenset()  # `canary = false`: no canary is expected for them
    ledger: LedgerConfig | None = None  # `[driver.ledger]`, when the spec resolved
    # The judges that run: the bound ones (a NeMo Gym config's: every one); None: the bound ones.
    running_judges: frozenset[str] | None = None

    @property
    def bound_judges(self) -> frozenset[str]:
        if self.running_judges is not None:
            return self.running_judges
        return frozenset(b.judge for b in self.bindings)

    @property
    def managed_bound_judges(self) -> frozenset[str]:
        return frozenset(j for j in self.bound_judges if self.judge_modes.get(j) == "managed")

    def judge_node(self, judge: str) -> int | None:
        for node in self.nodes:
            if judge in node.judges:
                return node.index
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "replicas": self.replicas,
            "gpus_per_replica": self.gpus_per_replica,
            "driver_node": self.driver_node,
            "nodes": [
                {
                    "index": n.index,
                    "trainer_gpus": n.trainer_gpus,
                    "rollout_gpus": n.rollout_gpus,
                    "ray_gpus": n.ray_gpus,
                    "ray_devices": list(n.ray_devices),
                    "judges": {k: list(v) for k, v in sorted(n.judges.items())},
                    "unused_devices": list(n.unused_devices),
                }
                for n in self.nodes
            ],
            "bindings": {b.verifier: {"judge": b.judge, "rubric": b.rubric} for b in self.bindings},
        }


def _ints(v: Any) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in v)
    except (TypeError, ValueError):
        return ()


def _no_training(config: RunConfig) -> str | None:
    """A run trains unless its spec says it does not, or it has no trainer at all."""
    if not config.driver.trains:
        return "the spec says the driver trains nothing ([driver] trains = false)"
    if config.trainer.nodes == 0 and config.inference.gpus > 0:
        return "an evaluation run: rollout engines and judges, no trainer (trainer.nodes = 0)"
    if config.trainer.nodes == 0:
        return "the spec has no trainer (trainer.nodes = 0)"
    return None


def _evaluation(config: RunConfig) -> bool:
    return config.trainer.nodes == 0 and config.inference.gpus > 0


def _node_from_launch(node: LaunchNodePlan) -> NodePlan:
    return NodePlan(
        index=node.index,
        trainer_gpus=node.trainer_gpus,
        rollout_gpus=node.rollout_gpus,
        ray_gpus=node.ray_gpus,
        ray_devices=tuple(node.ray_devices),
        judges={name: tuple(devices) for name, devices in node.judge_devices.items()},
        unused_devices=tuple(node.unused_devices),
        pool=node.pool,
    )


def _resolve(spec: dict[str, Any]) -> tuple[RunConfig | None, str | None, list[Finding]]:
    """The resolved model of the recorded spec (the audit reads nothing else of the spec)."""
    try:
        resolved = resolved_from_dict(spec)
        return RunConfig.from_spec(resolved), resolved.fingerprint, []
    except (SpecError, UsageError) as exc:
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        return (
            None,
            None,
            [Finding("error", "spec.unplannable", f"the recorded spec does not resolve: {reason}", names.SPEC)],
        )


def _from_launch(config: RunConfig, fingerprint: str | None) -> tuple[PlanView | None, list[Finding]]:
    try:
        plan = make_plan(config)
    except SpecError as exc:
        reason = str(exc).splitlines()[0][:300]
        return None, [Finding("error", "spec.unplannable", f"the recorded spec does not plan: {reason}", names.SPEC)]
    view = PlanView(
        source="launch",
        replicas=plan.replicas,
        gpus_per_replica=plan.gpus_per_replica,
        nodes=tuple(_node_from_launch(n) for n in plan.nodes),
        driver_node=plan.driver_node,
        bindings=config.bindings,
        judge_modes={name: j.mode for name, j in config.judges.items()},
        fingerprint=fingerprint,
        ray_nodes=plan.ray_nodes,
        ray_enabled=bool(config.ray.enabled),
        no_training=_no_training(config),
        evaluation=_evaluation(config),
        evidence=config.driver.evidence,
        unchecked_judges=_unchecked(config),
        ledger=config.driver.ledger,
        running_judges=frozenset(j.name for j in config.bound_judges),
    )
    return view, []


def _unchecked(config: RunConfig) -> frozenset[str]:
    return frozenset(name for name, j in config.judges.items() if not j.canary)


def _from_artifacts(config: RunConfig | None, run: LoadedRun) -> PlanView:
    """Best-effort description when the planner is unavailable: what the records claim."""
    ranks: set[int] = set()
    for schema in ("address", "placement", "phases", "heartbeat", "cleanup", "failure", "ack"):
        ranks |= ranks_of(run, schema)
    by_node = {}
    driver_node = None
    for rec in placements(run).values():
        if rec.node_index is None or rec.node_index in by_node:
            continue
        by_node[rec.node_index] = NodePlan(
            index=rec.node_index,
            trainer_gpus=rec.trainer_gpus or 0,
            rollout_gpus=rec.rollout_gpus or 0,
            ray_gpus=rec.ray_num_gpus or 0,
            ray_devices=rec.ray_devices or (),
            judges={k: v.devices or () for k, v in rec.judges.items()},
            unused_devices=rec.unused_devices or (),
        )
        if rec.is_driver_node:
            driver_node = rec.node_index
    # Ranks are 0..N-1, so the highest one seen bounds N from below.
    replicas = max([*ranks, *by_node, -1]) + 1
    return PlanView(
        source="artifacts",
        replicas=replicas,
        gpus_per_replica=config.gpus_per_replica if config else None,
        nodes=tuple(by_node[i] for i in sorted(by_node)),
        driver_node=driver_node,
        bindings=config.bindings if config else (),
        judge_modes={name: j.mode for name, j in config.judges.items()} if config else {},
        fingerprint=None,
        ray_enabled=bool(config.ray.enabled) if config else True,
        no_training=_no_training(config) if config else None,
        evaluation=_evaluation(config) if config else False,
        evidence=config.driver.evidence if config else None,
        unchecked_judges=_unchecked(config) if config else frozenset(),
        ledger=config.driver.ledger if config else None,
        running_judges=frozenset(j.name for j in config.bound_judges) if config else None,
    )


def expected_plan(
    spec: dict[str, Any], recorded_fingerprint: str | None, run: LoadedRun
) -> tuple[PlanView, list[Finding]]:
    config, fingerprint, findings = _resolve(spec)
    view = None
    if config is not None:
        view, plan_findings = _from_launch(config, fingerprint)
        findings += plan_findings
    if view is None:
        return _from_artifacts(config, run), findings
    if view.fingerprint and recorded_fingerprint and view.fingerprint != recorded_fingerprint:
        findings.append(
            Finding(
                "error",
                "spec.fingerprint",
                f"spec.json's fingerprint {recorded_fingerprint[:12]}… is not the fingerprint of its own "
                f"spec ({view.fingerprint[:12]}…): the spec was edited after the run, "
                "or planned by another version",
                names.SPEC,
                json_path="$.fingerprint",
            )
        )
    return view, findings
