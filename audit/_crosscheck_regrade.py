"""A judge-only job's record of the run it grades again (regrade.json, written by
gym-launch regrade): the source run it names must exist with the recorded fingerprint, the job's
plan must hold no trainer or rollout, and the services it starts are the profile's."""

from __future__ import annotations

from pathlib import Path

from audit._context import AuditContext
from audit._model import Finding
from launch.spec.errors import SpecError, UsageError
from launch.spec.load import load_spec
from schemas import names

__all__ = ["check_regrade", "is_regrade"]


def is_regrade(ctx: AuditContext) -> bool:
    return ctx.run.doc(names.REGRADE) is not None


def check_regrade(ctx: AuditContext) -> list[Finding]:
    f = names.REGRADE
    raw = ctx.run.doc(f)
    if raw is None:
        return []  # most runs: no regrade record, and its type is not loaded (issue 51 item 9)
    from schemas.records import RegradeRecord

    doc = RegradeRecord.from_json(raw)
    if doc is None:
        return []
    source = doc.source_run_dir or ""
    kind = doc.kind or "?"
    out = [Finding("info", "regrade.source", f"a judge-only job ({kind} profile) grading run {source} again", f)]
    try:
        fingerprint = load_spec(Path(source) / names.SPEC).fingerprint
    except (UsageError, SpecError) as exc:
        out.append(Finding("error", "regrade.source_missing", f"the source run's spec cannot be read: {exc}", f))
    else:
        if fingerprint != doc.source_fingerprint:
            out.append(
                Finding(
                    "error",
                    "regrade.source_mismatch",
                    f"the source run's spec has fingerprint {fingerprint[:16]}, the record "
                    f"{str(doc.source_fingerprint)[:16]}: the run was changed or is another one",
                    f,
                    json_path="$.source_fingerprint",
                )
            )
    policy = [n.index for n in ctx.plan.nodes if n.trainer_gpus or n.rollout_gpus]
    if policy:
        out.append(
            Finding("error", "regrade.policy_nodes", f"the job's plan gives nodes {policy} trainer or rollout GPUs", f)
        )
    services = sorted(str(s) for s in doc.services)
    if ctx.plan.source == "launch" and services != sorted(ctx.plan.managed_bound_judges):
        out.append(
            Finding(
                "error",
                "regrade.services_mismatch",
                f"the profile starts {services or 'no service'} but the job's spec serves "
                f"{sorted(ctx.plan.managed_bound_judges) or 'none'}",
                f,
                json_path="$.profile.services",
            )
        )
    return out
