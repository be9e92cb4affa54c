"""Cross-checks of the judging path: registry against the spec's bindings, managed judges'
endpoints against the plan, and canaries passed for every binding (a misconfigured judge
that silently grades everything 0 is the failure this exists to catch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from audit._context import AuditContext
from audit._model import Finding
from audit._views import rank_of
from launch.spec.sections import Binding
from schemas import names
from schemas.lenient import ABSENT
from schemas.records import CanariesRecord, CanaryBinding, RegistryJudge, RegistryRecord

if TYPE_CHECKING:  # loaded where a run has judges' records (most have none: issue 51 item 9)
    from audit._judge_replies import ReplyCounts
    from schemas.records import GatewayRecord, JudgeEndpointRecord

__all__ = ["check_canaries", "check_gateways", "check_judge_endpoints", "check_judge_replies", "check_registry"]


def _registry(ctx: AuditContext) -> RegistryRecord | None:
    return RegistryRecord.from_json(ctx.run.doc(names.REGISTRY))


def check_registry(ctx: AuditContext) -> list[Finding]:
    f = names.REGISTRY
    reg = _registry(ctx)
    if reg is None:
        if ctx.succeeded:
            return [Finding("error", "registry.missing", "no registry.json on a successful run", f)]
        return []
    return _registry_bindings(ctx, reg) + _registry_names(reg) + _registry_judges(ctx, reg)


def _binding_error(code: str, verifier: str, text: str) -> Finding:
    return Finding("error", code, f"binding {verifier!r} {text}", names.REGISTRY, json_path=f"$.bindings.{verifier}")


def _registry_bindings(ctx: AuditContext, reg: RegistryRecord) -> list[Finding]:
    """The registry's bindings against the spec's: missing, unexpected, different."""
    got = {v: (b.judge, b.rubric) for v, b in reg.bindings.items()}
    want = {b.verifier: (b.judge, b.rubric) for b in ctx.plan.bindings}
    missing = [
        _binding_error("registry.binding_missing", v, "from the spec is missing") for v in sorted(set(want) - set(got))
    ]
    unexpected = [
        _binding_error("registry.binding_unexpected", v, "is not in the spec") for v in sorted(set(got) - set(want))
    ]
    mismatch = [
        _binding_error("registry.binding_mismatch", v, f"is {got[v]} but the spec says {want[v]}")
        for v in sorted(set(got) & set(want))
        if got[v] != want[v]
    ]
    return missing + unexpected + mismatch


def _registry_names(reg: RegistryRecord) -> list[Finding]:
    """Every binding names a registered judge and rubric."""
    f = names.REGISTRY
    out: list[Finding] = []
    for verifier, b in sorted(reg.bindings.items()):
        if b.judge is not None and b.judge not in reg.judges:
            out.append(
                Finding(
                    "error", "registry.unknown_judge", f"binding {verifier!r} uses unregistered judge {b.judge!r}", f
                )
            )
        if b.rubric is not None and b.rubric not in reg.rubrics:
            out.append(
                Finding(
                    "error", "registry.unknown_rubric", f"binding {verifier!r} uses unregistered rubric {b.rubric!r}", f
                )
            )
    return out


def _registry_judges(ctx: AuditContext, reg: RegistryRecord) -> list[Finding]:
    """Each judge's mode as the spec says, and a managed judge on the rank the plan gave it."""
    f = names.REGISTRY
    plan = ctx.plan
    out: list[Finding] = []
    for name, entry in sorted(reg.judges.items()):
        mode = entry.mode
        want_mode = plan.judge_modes.get(name)
        if want_mode is not None and mode is not None and mode != want_mode:
            out.append(Finding("error", "registry.judge_mode", f"judge {name!r} is {mode}, spec says {want_mode}", f))
        if mode == "managed" and name in plan.managed_bound_judges and plan.source == "launch":
            node = plan.judge_node(name)
            host = ctx.owner_of_node.get(node) if node is not None else None
            rank = entry.rank
            if host is not None and rank is not None and rank != host:
                out.append(
                    Finding(
                        "error",
                        "registry.judge_rank",
                        f"judge {name!r} registered on rank {rank}, but the plan puts it on rank {host} (node {node})",
                        f,
                        json_path=f"$.judges.{name}.rank",
                    )
                )
    return out


def _judge_endpoints(ctx: AuditContext) -> list[JudgeEndpointRecord]:
    """Every readable judge-NAME-RANK.json, in the run's order."""
    out: list[JudgeEndpointRecord] = []
    arts = ctx.run.by_schema("judge-endpoint")
    if not arts:
        return out
    from schemas.records import JudgeEndpointRecord

    for art in arts:
        rank = rank_of(art)
        if art.judge is None or rank is None:
            continue
        rec = JudgeEndpointRecord.from_json(art.doc, judge=art.judge, rank=rank, relpath=art.relpath)
        if rec is not None:
            out.append(rec)
    return out


def check_judge_endpoints(ctx: AuditContext) -> list[Finding]:
    out: list[Finding] = []
    judges = (_registry(ctx) or RegistryRecord()).judges
    seen: set[tuple[str, int]] = set()
    for rec in _judge_endpoints(ctx):
        seen.add((rec.judge, rec.rank))
        out += _judge_endpoint(ctx, rec, judges.get(rec.judge))
    return out + _judge_endpoints_missing(ctx, seen)


def _judge_endpoint(ctx: AuditContext, rec: JudgeEndpointRecord, reg: RegistryJudge | None) -> list[Finding]:
    """One judge's endpoint record against the plan (its rank and devices) and the registry."""
    plan = ctx.plan
    judge, rank, rel = rec.judge, rec.rank, rec.relpath
    if plan.source == "launch" and judge not in plan.managed_bound_judges:
        return [Finding("error", "judge.unexpected", f"judge {judge!r} is not a bound managed judge", rel, rank)]
    out: list[Finding] = []
    node = plan.judge_node(judge)
    host = ctx.owner_of_node.get(node) if node is not None else None
    if host is not None and host != rank:
        out.append(
            Finding(
                "error",
                "judge.wrong_rank",
                f"judge {judge!r} ran on rank {rank}, but the plan puts it on rank {host}",
                rel,
                rank,
            )
        )
    if node is not None and plan.source == "launch" and rec.devices is not None:
        want = sorted(plan.nodes[node].judges.get(judge, ()))
        if want and sorted(rec.devices) != want:
            out.append(
                Finding(
                    "error",
                    "judge.devices",
                    f"judge {judge!r} used devices {sorted(rec.devices)}, the plan gave it {want}",
                    rel,
                    rank,
                    "$.devices",
                )
            )
    # The registry's endpoint is the judge's gateway; the judge itself is its upstream (a registry
    # written before gateways has only the endpoint).
    reg_endpoint = None if reg is None else reg.endpoint if reg.upstream is ABSENT else reg.upstream
    if rec.endpoint and reg_endpoint and rec.endpoint != reg_endpoint:
        out.append(
            Finding(
                "error",
                "judge.endpoint_mismatch",
                f"endpoint {rec.endpoint} differs from the registry's {reg_endpoint}",
                rel,
                rank,
                "$.endpoint",
            )
        )
    if ctx.succeeded and rec.ready is not True:
        out.append(Finding("error", "judge.not_ready", "judge never became ready on a successful run", rel, rank))
    return out


def _judge_endpoints_missing(ctx: AuditContext, seen: set[tuple[str, int]]) -> list[Finding]:
    """A bound managed judge whose host got as far as starting judges wrote its endpoint record."""
    plan = ctx.plan
    if plan.source != "launch":
        return []
    out: list[Finding] = []
    for judge in sorted(plan.managed_bound_judges):
        node = plan.judge_node(judge)
        host = ctx.owner_of_node.get(node) if node is not None else None
        if host is None or (judge, host) in seen:
            continue
        if ctx.succeeded or ctx.phase_started(host, "judge_health"):
            out.append(
                Finding(
                    "error",
                    "judge.endpoint_missing",
                    f"managed judge {judge!r} has no endpoint record on its host rank {host}",
                    names.judge_endpoint(judge, host),
                    host,
                )
            )
    return out


def check_canaries(ctx: AuditContext) -> list[Finding]:
    f = names.CANARIES
    doc = CanariesRecord.from_json(ctx.run.doc(f))
    if doc is None:
        text = "no judge-canaries.json although the spec binds judges"
        return ctx.missing(f, bool(ctx.plan.bindings), "canary.missing", text)
    entries, out = _canary_entries(ctx, doc)
    for b in ctx.plan.bindings:
        item = entries.get(b.verifier)
        if item is None and b.judge in ctx.plan.unchecked_judges:
            text = (
                f"binding {b.verifier!r} had no canary: judge {b.judge!r} has canary = false, its grades are unchecked"
            )
            out.append(Finding("warning", "canary.off", text, f))
            continue
        if item is None:
            out.append(Finding("error", "canary.binding_missing", f"no canary for binding {b.verifier!r}", f))
            continue
        out += _canary_binding(b, item)
    return out + _canaries_verdict(doc, out)


def _canary_entries(ctx: AuditContext, doc: CanariesRecord) -> tuple[dict[str, CanaryBinding], list[Finding]]:
    """The canaries by verifier, and a warning for each the spec does not bind."""
    bound = {b.verifier for b in ctx.plan.bindings}
    entries: dict[str, CanaryBinding] = {}
    out: list[Finding] = []
    for i, item in enumerate(doc.bindings):
        if item.verifier is None:
            continue
        entries[item.verifier] = item
        if item.verifier not in bound:
            out.append(
                Finding(
                    "warning",
                    "canary.unknown_binding",
                    f"canary for {item.verifier!r}, which the spec does not bind",
                    names.CANARIES,
                    json_path=f"$.bindings[{i}]",
                )
            )
    return entries, out


def _canary_binding(b: Binding, item: CanaryBinding) -> list[Finding]:
    """One binding's canary: the spec's judge and rubric, its model listed, passed."""
    f = names.CANARIES
    out: list[Finding] = []
    if (item.judge, item.rubric) != (b.judge, b.rubric):
        out.append(
            Finding(
                "error",
                "canary.binding_mismatch",
                f"canary for {b.verifier!r} used {item.judge_as_written!r}/{item.rubric_as_written!r}, "
                f"the spec binds {b.judge!r}/{b.rubric!r}",
                f,
            )
        )
    if item.model_listed is not True:
        out.append(
            Finding("error", "canary.model_not_listed", f"judge {b.judge!r} did not list its model ({b.verifier})", f)
        )
    if item.passed is not True:
        reason = item.reason or "no reason recorded"
        out.append(Finding("error", "canary.binding_failed", f"binding {b.verifier!r} failed its canary: {reason}", f))
    return out


def _canaries_verdict(doc: CanariesRecord, found: list[Finding]) -> list[Finding]:
    """The file's own verdict (`passed`) against what its bindings show."""
    f = names.CANARIES
    if doc.passed is not True and not any(x.code == "canary.binding_failed" for x in found):
        return [
            Finding(
                "error", "canary.failed", "judge-canaries.json says the canaries did not pass", f, json_path="$.passed"
            )
        ]
    if doc.passed is True and any(x.severity == "error" for x in found):
        return [
            Finding(
                "error",
                "canary.inconsistent",
                "passed=true although a binding failed or is missing",
                f,
                json_path="$.passed",
            )
        ]
    return []


def _reply_detail(r: ReplyCounts) -> str:
    parts = []
    for name, j in sorted(r.judges.items()):
        if j.gateway_replied is not None:
            lost = f", {j.gateway_lost} line(s) lost to rotation" if j.gateway_lost else ""
            n = j.gateway_replied
            parts.append(f"{name}: {n} repl{'y' if n == 1 else 'ies'} in its gateway's log, canaries excluded{lost}")
        elif j.server_answered is not None:
            parts.append(
                f"{name}: {j.server_answered} chat completion(s) answered 200 in {', '.join(j.logs)}, "
                f"less {j.canary_replies} canary repl{'y' if j.canary_replies == 1 else 'ies'}"
            )
        elif j.grades_replied is not None:
            lost = f", {j.grades_lost} line(s) lost to rotation" if j.grades_lost else ""
            parts.append(f"{name}: {j.grades_replied} replied grade(s) in grades-RANK.jsonl{lost}")
        else:
            parts.append(f"{name}: not countable")
    return "; ".join(parts)


def check_judge_replies(ctx: AuditContext) -> list[Finding]:
    """The driver's claim (driver-result.json judge_replies) against the independent counts.
    Above what the judges answered: an error (replies that never happened trained nothing).
    Below: a warning (a driver may count graded samples only, or other clients used the judge)."""
    r = ctx.replies
    if not ctx.plan.bindings or r is None or r.claimed is None:
        return []
    f = names.DRIVER_RESULT
    upper, lower = r.upper_bound, r.independent
    if upper is not None and r.claimed > upper:
        return [
            Finding(
                "error",
                "judge_replies.claim_exceeds",
                f"the driver claims {r.claimed} judge replies, but the judges answered at most {upper} "
                f"({_reply_detail(r)})",
                f,
                json_path="$.judge_replies",
            )
        ]
    if lower is not None and r.claimed < lower:
        return [
            Finding(
                "warning",
                "judge_replies.claim_below",
                f"the driver claims {r.claimed} judge replies, fewer than the {lower} the judges answered it "
                f"({_reply_detail(r)}): it counts something else, or another client used the judges",
                f,
                json_path="$.judge_replies",
            )
        ]
    if upper is None:
        return [
            Finding(
                "info",
                "judge_replies.unchecked",
                f"the driver's claim of {r.claimed} judge replies is not bounded: judges "
                f"{', '.join(r.uncounted) or '(some)'} are not countable (no gateway log, no access lines in their "
                "logs, no grades-RANK.jsonl)",
                f,
                json_path="$.judge_replies",
            )
        ]
    return []


def _gateway_records(ctx: AuditContext) -> dict[str, GatewayRecord | None]:
    """Each judge's gateway-NAME.json as read (None: unreadable)."""
    arts = ctx.run.by_schema("gateway")
    if not arts:
        return {}
    from schemas.records import GatewayRecord

    return {
        art.judge: GatewayRecord.from_json(art.doc, judge=art.judge, relpath=art.relpath)
        for art in arts
        if art.judge is not None and art.doc
    }


def check_gateways(ctx: AuditContext) -> list[Finding]:
    """Every bound judge has its gateway record, and the registry hands out that gateway."""
    out: list[Finding] = []
    registry = _registry(ctx)
    judges = (registry or RegistryRecord()).judges
    gateways = _gateway_records(ctx)
    for judge in sorted({b.judge for b in ctx.plan.bindings}):
        rec, reg = gateways.get(judge), judges.get(judge)
        if rec is None:
            if ctx.succeeded and reg is not None and reg.upstream is not ABSENT:
                out.append(
                    Finding(
                        "error",
                        "gateway.missing",
                        f"judge {judge!r} has no gateway record although the registry hands out a gateway",
                        names.gateway_record(judge),
                    )
                )
            continue
        gateway, reg_endpoint = rec.endpoint, reg.endpoint if reg is not None else None
        if gateway and reg_endpoint and gateway != reg_endpoint:
            out.append(
                Finding(
                    "error",
                    "gateway.bypassed",
                    f"the registry gives judge {judge!r} as {reg_endpoint}, not its gateway {gateway}: "
                    "its requests are neither bounded nor recorded",
                    names.REGISTRY,
                    json_path=f"$.judges.{judge}.endpoint",
                )
            )
    return out
