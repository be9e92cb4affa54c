"""What the run SHOULD look like: the plan recomputed from the recorded spec with `launch`.

The audit never trusts the agents' own idea of the plan; it recomputes it from spec.json, so
a replica that planned differently shows up as a mismatch. `launch` is the only planner: when
it cannot be imported or rejects the spec, the audit falls back to describing what the
placement records claim (and says that checks against the plan were skipped).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from launch.config import Binding

from .load import LoadedRun
from .model import Finding
from .views import as_dict, as_int, as_str, placements, ranks_of


@dataclass(frozen=True)
class NodePlan:
    index: int
    trainer_gpus: int
    rollout_gpus: int
    ray_gpus: int
    ray_devices: tuple[int, ...]
    judges: Mapping[str, tuple[int, ...]]  # judge name -> local devices
    unused_devices: tuple[int, ...]


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

    @property
    def bound_judges(self) -> frozenset[str]:
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


def _field(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _node_from_launch(index: int, node: Any) -> NodePlan:
    judge_gpus = _field(node, "judges", {}) or {}
    judge_devices = _field(node, "judge_devices", {}) or {}
    judges: dict[str, tuple[int, ...]] = {}
    if isinstance(judge_devices, Mapping):
        judges = {str(k): _ints(v) for k, v in judge_devices.items()}
    else:
        # A flat list: judges take consecutive devices in name order (ARCHITECTURE.md).
        flat, pos = _ints(judge_devices), 0
        for name in sorted(judge_gpus):
            n = int(judge_gpus[name])
            judges[str(name)] = flat[pos : pos + n]
            pos += n
    return NodePlan(
        index=index,
        trainer_gpus=int(_field(node, "trainer_gpus", 0) or 0),
        rollout_gpus=int(_field(node, "rollout_gpus", 0) or 0),
        ray_gpus=int(_field(node, "ray_gpus", 0) or 0),
        ray_devices=_ints(_field(node, "ray_devices", ())),
        judges=judges,
        unused_devices=_ints(_field(node, "unused_devices", ())),
    )


def _bindings_from_spec(spec: Mapping[str, Any]) -> tuple[Binding, ...]:
    out = []
    for verifier, b in sorted(as_dict(as_dict(spec.get("judging")).get("bindings")).items()):
        b = as_dict(b)
        judge, rubric = as_str(b.get("judge")), as_str(b.get("rubric"))
        if judge is not None and rubric is not None:
            out.append(Binding(str(verifier), judge, rubric))
    return tuple(out)


def _judge_modes_from_spec(spec: Mapping[str, Any]) -> dict[str, str]:
    return {str(n): as_str(as_dict(j).get("mode")) or "managed" for n, j in as_dict(spec.get("judges")).items()}


def _from_launch(spec: dict[str, Any]) -> tuple[PlanView | None, list[Finding]]:
    try:
        from launch import config as lconfig
        from launch import plan as lplan
        from launch import spec as lspec
    except ImportError as exc:
        return None, [Finding("warning", "plan.unavailable", f"cannot import the planner ({exc}); plan checks skipped")]
    try:
        resolved = lspec.resolved_from_dict(spec)
        config = lconfig.RunConfig.from_spec(resolved)
        plan = lplan.plan(config)
    except Exception as exc:  # launch raises SpecError for a bad spec; anything else is still a finding
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        return None, [Finding("error", "spec.unplannable", f"the recorded spec does not plan: {reason}", "spec.json")]
    nodes = tuple(_node_from_launch(i, n) for i, n in enumerate(_field(plan, "nodes", ()) or ()))
    raw = _field(config, "bindings", ()) or ()
    # RunConfig.bindings is a tuple of Binding(verifier, judge, rubric); accept a mapping too.
    items = list(raw.items()) if isinstance(raw, Mapping) else [(_field(b, "verifier"), b) for b in raw]
    bindings = sorted(
        (Binding(str(v), str(_field(b, "judge")), str(_field(b, "rubric"))) for v, b in items),
        key=lambda b: b.verifier,
    )
    modes = {str(n): str(_field(j, "mode", "managed")) for n, j in (_field(config, "judges", {}) or {}).items()}
    gpr = as_int(_field(plan, "gpus_per_replica")) or as_int(as_dict(spec.get("launch")).get("gpus_per_replica"))
    view = PlanView(
        source="launch",
        replicas=int(_field(plan, "replicas", len(nodes))),
        gpus_per_replica=gpr if gpr is not None else 8,
        nodes=nodes,
        driver_node=as_int(_field(plan, "driver_node")),
        bindings=tuple(bindings) or _bindings_from_spec(spec),
        judge_modes=modes or _judge_modes_from_spec(spec),
        fingerprint=as_str(_field(resolved, "fingerprint")),
    )
    return view, []


def _from_artifacts(spec: Mapping[str, Any], run: LoadedRun) -> PlanView:
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
        gpus_per_replica=as_int(as_dict(spec.get("launch")).get("gpus_per_replica")),
        nodes=tuple(by_node[i] for i in sorted(by_node)),
        driver_node=driver_node,
        bindings=_bindings_from_spec(spec),
        judge_modes=_judge_modes_from_spec(spec),
        fingerprint=None,
    )


def expected_plan(
    spec: dict[str, Any], recorded_fingerprint: str | None, run: LoadedRun
) -> tuple[PlanView, list[Finding]]:
    view, findings = _from_launch(spec)
    if view is None:
        return _from_artifacts(spec, run), findings
    if view.fingerprint and recorded_fingerprint and view.fingerprint != recorded_fingerprint:
        findings.append(
            Finding(
                "error",
                "spec.fingerprint",
                f"spec.json's fingerprint {recorded_fingerprint[:12]}… is not the fingerprint of its own "
                f"spec ({view.fingerprint[:12]}…): the spec was edited after the run, "
                "or planned by another version",
                "spec.json",
                json_path="$.fingerprint",
            )
        )
    return view, findings
