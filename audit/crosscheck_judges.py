"""Cross-checks of the judging path: registry against the spec's bindings, managed judges'
endpoints against the plan, and canaries passed for every binding (a misconfigured judge
that silently grades everything 0 is the failure this exists to catch)."""

from __future__ import annotations

from typing import Any

from audit.context import AuditContext
from audit.model import Finding
from audit.views import rank_of
from schemas import names
from schemas.lenient import as_bool, as_devices, as_dict, as_int, as_list, as_str


def check_registry(ctx: AuditContext) -> list[Finding]:
    f = names.REGISTRY
    doc = ctx.run.doc(f)
    plan = ctx.plan
    if doc is None:
        if ctx.succeeded:
            return [Finding("error", "registry.missing", "no registry.json on a successful run", f)]
        return []
    out: list[Finding] = []
    judges = as_dict(doc.get("judges"))
    rubrics = as_dict(doc.get("rubrics"))
    got = {
        str(v): (as_str(as_dict(b).get("judge")), as_str(as_dict(b).get("rubric")))
        for v, b in as_dict(doc.get("bindings")).items()
    }
    want = {b.verifier: (b.judge, b.rubric) for b in plan.bindings}
    for verifier in sorted(set(want) - set(got)):
        out.append(
            Finding(
                "error",
                "registry.binding_missing",
                f"binding {verifier!r} from the spec is missing",
                f,
                json_path=f"$.bindings.{verifier}",
            )
        )
    for verifier in sorted(set(got) - set(want)):
        out.append(
            Finding(
                "error",
                "registry.binding_unexpected",
                f"binding {verifier!r} is not in the spec",
                f,
                json_path=f"$.bindings.{verifier}",
            )
        )
    for verifier in sorted(set(got) & set(want)):
        if got[verifier] != want[verifier]:
            out.append(
                Finding(
                    "error",
                    "registry.binding_mismatch",
                    f"binding {verifier!r} is {got[verifier]} but the spec says {want[verifier]}",
                    f,
                    json_path=f"$.bindings.{verifier}",
                )
            )
    for verifier, (judge, rubric) in sorted(got.items()):
        if judge is not None and judge not in judges:
            out.append(
                Finding(
                    "error",
                    "registry.unknown_judge",
                    f"binding {verifier!r} uses unregistered judge {judge!r}",
                    f,
                )
            )
        if rubric is not None and rubric not in rubrics:
            out.append(
                Finding(
                    "error",
                    "registry.unknown_rubric",
                    f"binding {verifier!r} uses unregistered rubric {rubric!r}",
                    f,
                )
            )
    for name, entry in sorted(judges.items()):
        entry = as_dict(entry)
        mode = as_str(entry.get("mode"))
        want_mode = plan.judge_modes.get(str(name))
        if want_mode is not None and mode is not None and mode != want_mode:
            out.append(Finding("error", "registry.judge_mode", f"judge {name!r} is {mode}, spec says {want_mode}", f))
        if mode == "managed" and name in plan.managed_bound_judges and plan.source == "launch":
            node = plan.judge_node(str(name))
            host = ctx.owner_of_node.get(node) if node is not None else None
            rank = as_int(entry.get("rank"))
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


def check_judge_endpoints(ctx: AuditContext) -> list[Finding]:
    out: list[Finding] = []
    plan = ctx.plan
    registry = as_dict(as_dict(ctx.run.doc(names.REGISTRY)).get("judges"))
    seen: set[tuple[str, int]] = set()
    for art in ctx.run.by_schema("judge-endpoint"):
        rank = rank_of(art)
        if art.judge is None or rank is None or art.doc is None:
            continue
        seen.add((art.judge, rank))
        node = plan.judge_node(art.judge)
        host = ctx.owner_of_node.get(node) if node is not None else None
        if plan.source == "launch" and art.judge not in plan.managed_bound_judges:
            out.append(
                Finding(
                    "error",
                    "judge.unexpected",
                    f"judge {art.judge!r} is not a bound managed judge",
                    art.relpath,
                    rank,
                )
            )
            continue
        if host is not None and host != rank:
            out.append(
                Finding(
                    "error",
                    "judge.wrong_rank",
                    f"judge {art.judge!r} ran on rank {rank}, but the plan puts it on rank {host}",
                    art.relpath,
                    rank,
                )
            )
        devices = as_devices(art.doc.get("devices"))
        if node is not None and plan.source == "launch" and devices is not None:
            want = sorted(plan.nodes[node].judges.get(art.judge, ()))
            if want and sorted(devices) != want:
                out.append(
                    Finding(
                        "error",
                        "judge.devices",
                        f"judge {art.judge!r} used devices {sorted(devices)}, the plan gave it {want}",
                        art.relpath,
                        rank,
                        "$.devices",
                    )
                )
        reg = as_dict(registry.get(art.judge))
        # The registry's endpoint is the judge's gateway; the judge itself is its upstream (a registry
        # written before gateways has only the endpoint).
        endpoint = as_str(art.doc.get("endpoint"))
        reg_endpoint = as_str(reg.get("upstream")) if "upstream" in reg else as_str(reg.get("endpoint"))
        if endpoint and reg_endpoint and endpoint != reg_endpoint:
            out.append(
                Finding(
                    "error",
                    "judge.endpoint_mismatch",
                    f"endpoint {endpoint} differs from the registry's {reg_endpoint}",
                    art.relpath,
                    rank,
                    "$.endpoint",
                )
            )
        if ctx.succeeded and as_bool(art.doc.get("ready")) is not True:
            out.append(
                Finding(
                    "error",
                    "judge.not_ready",
                    "judge never became ready on a successful run",
                    art.relpath,
                    rank,
                )
            )
    if plan.source == "launch":
        for judge in sorted(plan.managed_bound_judges):
            node = plan.judge_node(judge)
            host = ctx.owner_of_node.get(node) if node is not None else None
            if host is None or (judge, host) in seen:
                continue
            # Expected once the host got as far as starting judges.
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
    doc = ctx.run.doc(f)
    bindings = ctx.plan.bindings
    if doc is None:
        if ctx.succeeded and bindings:
            return [Finding("error", "canary.missing", "no judge-canaries.json although the spec binds judges", f)]
        return []
    out: list[Finding] = []
    entries: dict[str, dict[str, Any]] = {}
    for i, item in enumerate(as_list(doc.get("bindings"))):
        item = as_dict(item)
        verifier = as_str(item.get("verifier"))
        if verifier is None:
            continue
        entries[verifier] = item
        if verifier not in {b.verifier for b in bindings}:
            out.append(
                Finding(
                    "warning",
                    "canary.unknown_binding",
                    f"canary for {verifier!r}, which the spec does not bind",
                    f,
                    json_path=f"$.bindings[{i}]",
                )
            )
    for b in bindings:
        item = entries.get(b.verifier)
        if item is None:
            out.append(Finding("error", "canary.binding_missing", f"no canary for binding {b.verifier!r}", f))
            continue
        if (as_str(item.get("judge")), as_str(item.get("rubric"))) != (b.judge, b.rubric):
            out.append(
                Finding(
                    "error",
                    "canary.binding_mismatch",
                    f"canary for {b.verifier!r} used {item.get('judge')!r}/{item.get('rubric')!r}, "
                    f"the spec binds {b.judge!r}/{b.rubric!r}",
                    f,
                )
            )
        if as_bool(item.get("model_listed")) is not True:
            out.append(
                Finding(
                    "error",
                    "canary.model_not_listed",
                    f"judge {b.judge!r} did not list its model ({b.verifier})",
                    f,
                )
            )
        if as_bool(item.get("passed")) is not True:
            reason = as_str(item.get("reason")) or "no reason recorded"
            out.append(
                Finding("error", "canary.binding_failed", f"binding {b.verifier!r} failed its canary: {reason}", f)
            )
    if as_bool(doc.get("passed")) is not True and not any(x.code == "canary.binding_failed" for x in out):
        out.append(
            Finding(
                "error",
                "canary.failed",
                "judge-canaries.json says the canaries did not pass",
                f,
                json_path="$.passed",
            )
        )
    elif as_bool(doc.get("passed")) is True and any(x.severity == "error" for x in out):
        out.append(
            Finding(
                "error",
                "canary.inconsistent",
                "passed=true although a binding failed or is missing",
                f,
                json_path="$.passed",
            )
        )
    return out


def _reply_detail(ctx: AuditContext) -> str:
    parts = []
    for name, j in sorted(ctx.replies.judges.items()):
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
    if not ctx.plan.bindings or r.claimed is None:
        return []
    f = names.DRIVER_RESULT
    upper, lower = r.upper_bound, r.independent
    if upper is not None and r.claimed > upper:
        return [
            Finding(
                "error",
                "judge_replies.claim_exceeds",
                f"the driver claims {r.claimed} judge replies, but the judges answered at most {upper} "
                f"({_reply_detail(ctx)})",
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
                f"({_reply_detail(ctx)}): it counts something else, or another client used the judges",
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


def check_gateways(ctx: AuditContext) -> list[Finding]:
    """Every bound judge has its gateway record, and the registry hands out that gateway."""
    out: list[Finding] = []
    registry = ctx.run.doc(names.REGISTRY)
    judges = as_dict(as_dict(registry).get("judges"))
    records = {art.judge: art for art in ctx.run.by_schema("gateway") if art.judge is not None and art.doc}
    for judge in sorted({b.judge for b in ctx.plan.bindings}):
        art = records.get(judge)
        if art is None:
            if ctx.succeeded and registry is not None and "upstream" in as_dict(judges.get(judge)):
                out.append(
                    Finding(
                        "error",
                        "gateway.missing",
                        f"judge {judge!r} has no gateway record although the registry hands out a gateway",
                        names.gateway_record(judge),
                    )
                )
            continue
        assert art.doc is not None
        gateway, reg_endpoint = as_str(art.doc.get("endpoint")), as_str(as_dict(judges.get(judge)).get("endpoint"))
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
