"""Cross-checks of who joined and which GPU went where: ranks, addresses, placement devices,
CUDA masks, and Ray's live layout against the plan recomputed from the spec."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from audit._context import AuditContext
from audit._expected import NodePlan
from audit._model import Finding, Severity
from audit._views import PlacementRec, mask_entries
from schemas import names
from schemas.records import RayLayoutRecord

__all__ = ["check_addresses", "check_placements", "check_ranks", "check_ray_layout"]


def check_ranks(ctx: AuditContext) -> list[Finding]:
    out: list[Finding] = []
    expected = set(ctx.expected_ranks)
    # A record that is missing on a run that failed early is expected; on a run that claims
    # success it means a replica never joined or its record was lost.
    sev: Severity = "error" if ctx.outcome != "failed" else "warning"
    for rank in ctx.expected_ranks:
        if rank not in ctx.addresses:
            out.append(Finding(sev, "rank.missing_address", "no address record", names.address(rank), rank))
        if rank not in ctx.placements:
            out.append(Finding(sev, "rank.missing_placement", "no placement record", names.placement(rank), rank))
        if rank not in ctx.phases:
            out.append(Finding(sev, "rank.missing_phases", "no phase timeline", names.phases(rank), rank))
    for art in sorted(ctx.run.artifacts.values(), key=lambda a: a.relpath):
        if art.file_rank is not None and art.file_rank not in expected:
            out.append(
                Finding(
                    "error",
                    "rank.unexpected",
                    f"rank {art.file_rank} is not part of this run (ranks 0..{len(expected) - 1})",
                    art.relpath,
                    art.file_rank,
                )
            )
    return out


def check_addresses(ctx: AuditContext) -> list[Finding]:
    out: list[Finding] = []
    counts = Counter(a.address for a in ctx.addresses.values() if a.address)
    for addr, n in sorted(counts.items()):
        if n > 1:
            ranks = sorted(r for r, a in ctx.addresses.items() if a.address == addr)
            out.append(
                Finding(
                    "error",
                    "address.duplicate",
                    f"ranks {ranks} share address {addr}: two replicas on one host",
                    names.ADDRESSES_DIR,
                )
            )
    return out


def _overlaps(groups: dict[str, tuple[int, ...]]) -> list[str]:
    seen: dict[int, str] = {}
    problems = []
    for role, devices in groups.items():
        for d in devices:
            if d in seen:
                problems.append(f"device {d} is both {seen[d]} and {role}")
            else:
                seen[d] = role
    return problems


def check_placements(ctx: AuditContext) -> list[Finding]:
    out: list[Finding] = []
    plan = ctx.plan
    planned_nodes: dict[int, NodePlan] = {}
    for n in plan.nodes:
        planned_nodes.setdefault(n.index, n)  # a lookup per rank, not a scan: 8192 ranks
    for rank, rec in sorted(ctx.placements.items()):
        owned = ctx.node_of_rank.get(rank)
        planned = planned_nodes.get(owned) if owned is not None else None
        out += _placement_identity(ctx, rank, rec, owned, planned)
        out += _placement_devices(ctx, rank, rec)
        node = rec.node_index if rec.node_index is not None else owned
        if plan.source == "launch" and node is not None:
            out.extend(_check_against_plan(ctx, rec, node))
    return out


def _placement_identity(
    ctx: AuditContext, rank: int, rec: PlacementRec, owned: int | None, planned: NodePlan | None
) -> list[Finding]:
    """The placement's address, node and pool against the rendezvous and the plan."""
    f = rec.relpath
    out: list[Finding] = []
    addr = ctx.addresses.get(rank)
    if addr and addr.address and rec.address and addr.address != rec.address:
        out.append(
            Finding(
                "error",
                "placement.address",
                f"placement address {rec.address} differs from rendezvous address {addr.address}",
                f,
                rank,
                "$.address",
            )
        )
    if rec.node_index is not None and owned is not None and rec.node_index != owned:
        out.append(
            Finding(
                "error",
                "placement.node_index",
                f"claims planned node {rec.node_index}, but its address sorts to node {owned}",
                f,
                rank,
                "$.node_index",
            )
        )
    if planned is not None and planned.pool is not None and rec.pool != planned.pool:
        # A pinned service must land on its pool (seed 001): the node the address order gave
        # this rank is in another pool than the one its agent ran it as.
        out.append(
            Finding(
                "error",
                "placement.pool",
                f"ran as pool {rec.pool}, but planned node {owned} is in pool {planned.pool}",
                f,
                rank,
                "$.pool",
            )
        )
    return out


def _placement_devices(ctx: AuditContext, rank: int, rec: PlacementRec) -> list[Finding]:
    """The node's device groups: disjoint, in range, masks as said, Ray's count its devices."""
    f = rec.relpath
    out: list[Finding] = []
    groups: dict[str, tuple[int, ...]] = {"ray": rec.ray_devices or ()}
    for name, slot in sorted(rec.judges.items()):
        groups[f"judge {name}"] = slot.devices or ()
    groups["policy"] = rec.policy_devices or ()
    groups["unused"] = rec.unused_devices or ()
    for problem in _overlaps(groups):
        out.append(Finding("error", "devices.overlap", problem, f, rank))
    capacity = ctx.plan.gpus_per_replica
    if capacity is not None:
        for role, devices in groups.items():
            bad = [d for d in devices if not 0 <= d < capacity]
            if bad:
                text = f"{role} devices {bad} outside 0..{capacity - 1}"
                out.append(Finding("error", "devices.out_of_range", text, f, rank))
    out.extend(_check_masks(rec, f, rank))
    if rec.ray_devices is not None and rec.ray_num_gpus is not None and rec.ray_num_gpus != len(rec.ray_devices):
        out.append(
            Finding(
                "error",
                "devices.num_gpus",
                f"Ray advertises {rec.ray_num_gpus} GPUs but owns {len(rec.ray_devices)} devices",
                f,
                rank,
                "$.ray.num_gpus",
            )
        )
    return out


def _check_masks(rec: PlacementRec, f: str, rank: int) -> list[Finding]:
    """Judge devices must be absent from Ray's CUDA mask: otherwise a trainer or rollout actor can
    land on a judge's GPU (and receive policy weights)."""
    out: list[Finding] = []
    ray_mask = set(mask_entries(rec.ray_mask))
    visible = rec.visible_devices
    for name, slot in sorted(rec.judges.items()):
        shared = ray_mask & set(mask_entries(slot.mask))
        if shared:
            out.append(
                Finding(
                    "error",
                    "devices.judge_in_ray_mask",
                    f"judge {name}'s devices {sorted(shared)} are in Ray's CUDA_VISIBLE_DEVICES",
                    f,
                    rank,
                    "$.ray.cuda_visible_devices",
                )
            )
    # The mask must name exactly Ray's devices. Devices are indices into the node's visible list.
    devices = rec.ray_devices
    checkable = devices is not None and rec.ray_mask is not None and visible
    if checkable and devices is not None and all(0 <= d < len(visible) for d in devices):
        want = [visible[d] for d in devices]
        if sorted(mask_entries(rec.ray_mask)) != sorted(want):
            out.append(
                Finding(
                    "error",
                    "devices.mask_mismatch",
                    f"Ray's CUDA_VISIBLE_DEVICES {rec.ray_mask!r} is not "
                    f"its devices {list(devices)}"
                    f" ({','.join(want)!r})",
                    f,
                    rank,
                    "$.ray.cuda_visible_devices",
                )
            )
    return out


def _check_against_plan(ctx: AuditContext, rec: PlacementRec, node_index: int) -> list[Finding]:
    plan = ctx.plan
    f, rank = rec.relpath, rec.rank
    if not 0 <= node_index < len(plan.nodes):
        return [Finding("error", "placement.plan_mismatch", f"node {node_index} is not in the plan", f, rank)]
    node = plan.nodes[node_index]
    diffs = []
    if rec.trainer_gpus is not None and rec.trainer_gpus != node.trainer_gpus:
        diffs.append(f"trainer_gpus {rec.trainer_gpus} (plan {node.trainer_gpus})")
    if rec.rollout_gpus is not None and rec.rollout_gpus != node.rollout_gpus:
        diffs.append(f"rollout_gpus {rec.rollout_gpus} (plan {node.rollout_gpus})")
    if rec.ray_num_gpus is not None and rec.ray_num_gpus != node.ray_gpus:
        diffs.append(f"ray.num_gpus {rec.ray_num_gpus} (plan {node.ray_gpus})")
    if node.ray_devices and rec.ray_devices is not None and sorted(rec.ray_devices) != sorted(node.ray_devices):
        diffs.append(f"ray devices {list(rec.ray_devices)} (plan {list(node.ray_devices)})")
    got_judges = {k: sorted(v.devices or ()) for k, v in rec.judges.items()}
    want_judges = {k: sorted(v) for k, v in node.judges.items()}
    if set(got_judges) != set(want_judges):
        diffs.append(f"judges {sorted(got_judges)} (plan {sorted(want_judges)})")
    else:
        for name in sorted(want_judges):
            if want_judges[name] and got_judges[name] != want_judges[name]:
                diffs.append(f"judge {name} devices {got_judges[name]} (plan {want_judges[name]})")
    if (
        node.unused_devices
        and rec.unused_devices is not None
        and sorted(rec.unused_devices) != sorted(node.unused_devices)
    ):
        diffs.append(f"unused devices {list(rec.unused_devices)} (plan {list(node.unused_devices)})")
    out = [Finding("error", "placement.plan_mismatch", f"node {node_index}: {d}", f, rank) for d in diffs]
    known = rec.is_driver_node is not None and plan.driver_node is not None
    if known and rec.is_driver_node != (node_index == plan.driver_node):
        out.append(
            Finding(
                "error",
                "placement.driver_node",
                f"is_driver_node={rec.is_driver_node}, but the plan puts the driver on node {plan.driver_node}",
                f,
                rank,
                "$.is_driver_node",
            )
        )
    if known and rec.is_head is not None and rec.is_head != (node_index == plan.driver_node):
        out.append(
            Finding(
                "error",
                "placement.head",
                f"is_head={rec.is_head}, but the Ray head is on the driver's node (node {plan.driver_node})",
                f,
                rank,
                "$.is_head",
            )
        )
    return out


def check_ray_layout(ctx: AuditContext) -> list[Finding]:
    f = names.RAY_LAYOUT
    layout = RayLayoutRecord.from_json(ctx.run.doc(f))
    if layout is None:
        return ctx.missing(f, ctx.plan.ray_enabled, "ray_layout.missing", "no ray-layout.json on a successful run")
    out: list[Finding] = []
    expected_doc, actual_doc = layout.expected, layout.actual
    if ctx.plan.source == "launch" and ctx.plan.nodes and len(ctx.owner_of_node) == len(ctx.plan.nodes):
        want: dict[str, float] = {}
        # A set: asked once per node, and a tuple's `in` is a scan of every node.
        joined = set(ctx.plan.ray_nodes) if ctx.plan.ray_nodes is not None else None
        for node in ctx.plan.nodes:
            if joined is not None and node.index not in joined:
                continue  # a node outside ray.node_pools runs no Ray
            rank = ctx.owner_of_node.get(node.index)
            addr = ctx.addresses.get(rank) if rank is not None else None
            if addr is None or addr.address is None:
                want = {}
                break
            want[addr.address] = float(node.ray_gpus)
        if want and _gpus(expected_doc) != want:
            out.append(
                Finding(
                    "error",
                    "ray_layout.expected_mismatch",
                    f"expected layout {_fmt(expected_doc)} is not the plan {_fmt(want)}",
                    f,
                    json_path="$.expected",
                )
            )
    if _gpus(actual_doc) != _gpus(expected_doc):
        out.append(
            Finding(
                "error",
                "ray_layout.actual_mismatch",
                f"Ray's live layout {_fmt(actual_doc)} differs from the expected {_fmt(expected_doc)}",
                f,
                json_path="$.actual",
            )
        )
    if layout.passed is not True:
        detail = "; ".join(layout.problems[:5]) or "no problems listed"
        out.append(Finding("error", "ray_layout.failed", f"the readiness gate did not pass: {detail}", f))
    return out


def _gpus(d: Mapping[str, object]) -> dict[str, float | None]:
    return {k: float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None for k, v in d.items()}


def _fmt(d: Mapping[str, object]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" if isinstance(v, float) else f"{k}: {v}" for k, v in sorted(d.items())) + "}"
