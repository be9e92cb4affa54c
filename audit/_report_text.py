"""Terminal report: the verdict, then what ended the run (its first cause), then the summaries,
the cascade and the findings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from audit._doorbell import describe as describe_doorbell
from audit._filesystem import describe as describe_filesystem
from audit._model import AttemptSummary, AuditResult, Cause, Finding
from audit._ray_startup import describe as describe_ray_startup
from audit._restarts import REFUSED
from audit._sanitize import terminal_safe as _t
from schemas import names, timefmt

if TYPE_CHECKING:  # a hang's readers (stacks, collectives) load only for a run that kept them
    from audit._collectives import Summary as CollectivesSummary
    from audit.stacks import Summary as StacksSummary

__all__ = ["cause_headline", "fmt_time", "render"]


def fmt_time(t: float | None) -> str:
    if t is None:
        return "unknown time"
    return timefmt.iso_ms(t, sep=" ")


def cause_headline(c: Cause) -> str:
    """ "rank R, KIND, phase P, reacting to rank Q, TIME": how every report introduces a cause."""
    # A scheduler's ending is the job's, not a rank's.
    parts = [f"{c.scheduler} (the scheduler)" if c.scheduler else f"rank {c.rank}", c.kind]
    if c.phase:
        parts.append(f"phase {c.phase}")
    if c.reacting_to is not None:
        parts.append(f"reacting to rank {c.reacting_to}")
    parts.append(fmt_time(c.wall_time))
    return ", ".join(parts)


def _cause_line(c: Cause) -> str:
    return _t(cause_headline(c) + f": {c.cause}")


def _finding_line(f: Finding) -> str:
    where = f.file or ""
    if f.rank is not None and (f.file is None or str(f.rank) not in f.file):
        where = f"{where} (rank {f.rank})".strip()
    if f.json_path and f.json_path != "$":
        where = f"{where} {f.json_path}".strip()
    label = f"{f.severity.upper():7} {f.code}"
    return _t(f"  {label:38} {where + ': ' if where else ''}{f.message}")


def _training_lines(t: dict[str, Any] | None) -> list[str]:
    if not t:
        return []
    if not t.get("required"):
        return [_t(f"  training: not required ({t.get('not_required_because')})")]
    source = {"driver-result": names.DRIVER_RESULT, "evidence": "[driver.evidence]", "none": "none"}.get(
        str(t.get("source")), str(t.get("source"))
    )
    steps = t.get("optimizer_steps")
    line = f"  training evidence: {source}" + (f", {steps} optimizer step(s)" if steps is not None else "")
    if t.get("refresh") == "none":
        line += ', no separate policy refresh (refresh = "none")'
    elif t.get("policy_refreshes") is not None:
        line += f", {t.get('policy_refreshes')} policy refresh(es)"
    out = [line]
    for src in (t.get("evidence") or {}).get("sources", []):
        files = ", ".join(src.get("files") or []) or "no file"
        out.append(f"    {src.get('source')}: {src.get('optimizer_steps')} step(s) in {files}")
    return [_t(x) for x in out + _trainer_record_lines(t.get("evidence") or {})]


def _trainer_record_lines(ev: dict[str, Any]) -> list[str]:
    """The trainer's replay lines and its rollout dumps' verifier diagnostics, when it wrote them."""
    out = []
    replay = ev.get("replay_routes")
    if replay:
        out.append(f"    replay routes: {replay.get('lines')} line(s) on {len(replay.get('per_rank') or {})} rank(s)")
    rollouts = ev.get("rollout_diagnostics")
    if rollouts:
        out.append(
            f"    rollout dumps: {rollouts.get('samples')} sample(s) in {len(rollouts.get('files') or [])} file(s), "
            f"{rollouts.get('without_diagnostics')} without verifier diagnostics"
        )
        for binding, b in (rollouts.get("bindings") or {}).items():
            statuses = ", ".join(f"{k} {v}" for k, v in (b.get("statuses") or {}).items())
            failed = b.get("failed_attempts")
            out.append(f"      {binding}: {b.get('samples')} sample(s) ({statuses}), {failed} failed attempt(s)")
    return out


def _reply_lines(r: dict[str, Any] | None) -> list[str]:
    if not r:
        return []

    def n(v: Any) -> str:
        return "unknown" if v is None else str(v)

    claimed = "no claim" if r.get("claimed") is None else f"claimed {r.get('claimed')}"
    counted = f"counted {n(r.get('independent'))}"
    if r.get("upper_bound") is not None and r.get("upper_bound") != r.get("independent"):
        counted += f" (at most {r.get('upper_bound')})"
    out = [f"  judge replies: {claimed}, {counted}"]
    for name, j in sorted((r.get("judges") or {}).items()):
        server = j.get("server_answered")
        parts = [
            f"server log {server} answered 200 less {j.get('canary_replies')} canary"
            if server is not None
            else "no access lines in its log",
        ]
        if j.get("gateway_replied") is not None:
            lost = j.get("gateway_lost_to_rotation")
            parts.insert(
                0, f"gateway {j.get('gateway_replied')} replied" + (f" (+{lost} lost to rotation)" if lost else "")
            )
        if j.get("grades_replied") is not None:
            lost = j.get("grades_lost_to_rotation")
            parts.append(f"grades {j.get('grades_replied')} replied" + (f" (+{lost} lost to rotation)" if lost else ""))
        out.append(f"    {name}: " + "; ".join(parts))
    return [_t(x) for x in out]


def _gateway_lines(gateways: dict[str, Any] | None) -> list[str]:
    """Per judge, what its gateway served: requests, replies, errors by kind, latency and queue wait."""
    out = []
    for name, g in sorted((gateways or {}).items()):

        def ms(d: Any) -> str:
            d = d or {}
            return ", ".join(f"{k} {d[k]:g} ms" for k in ("p50", "p90", "p99") if d.get(k) is not None) or "none"

        errors = ", ".join(f"{k} {v}" for k, v in (g.get("errors") or {}).items()) or "none"
        out.append(
            f"  judge {name} (gateway): {g.get('requests')} request(s), {g.get('replies')} "
            f"{'reply' if g.get('replies') == 1 else 'replies'} (+{g.get('canary')} canary); errors: {errors}"
        )
        out.append(f"    latency {ms(g.get('latency_ms'))}; queue wait {ms(g.get('queue_ms'))}")
    return [_t(x) for x in out]


def _entered(a: AttemptSummary) -> str:
    """How the attempt began, from its claim: a scheduler's restart of the same launch, or --resume."""
    if a.attempt == 1 or a.mode is None:
        return f" (launch {a.token})" if a.token else ""  # the first start, or no claim
    how = "restarted by the scheduler" if a.mode == "restart" else "resumed"
    return f" ({how}, launch {a.token})" if a.token else f" ({how})"


def _first_cause_lines(
    fc: Cause,
    unfit: dict[str, Any] | None = None,
    stacks: StacksSummary | None = None,
    collectives: CollectivesSummary | None = None,
) -> list[str]:
    """The first cause's block: its headline (rank, kind, phase, time, message), a hang's odd one
    out, one line of context (who reported it, when in its agent's life, the binding, an unfit
    node's exclude line), then the log it points at. Compact on purpose: all of it up to the log's
    name sits in the report's first six lines; a hang's stacks, grouped across ranks, follow the log."""
    lines = ["First cause:", "  " + _cause_line(fc)]
    stack_lines = stacks.lines() if stacks is not None else []
    odd: list[str] = []
    if stacks is not None:  # loaded only for a run that kept stacks (the audit's start-up stays lean)
        from audit.stacks import WAITING

        odd = [ln for ln in stack_lines if ln.startswith(("odd one out: ", WAITING))]
    collective = collectives.lines() if collectives is not None and collectives.named else []
    # Where the run was stuck, named before anything else: the collective, else the odd stack.
    lines += [_t(f"  {ln}") for ln in (collective or odd)[:1]]
    context = []
    if fc.reported_by is not None:
        context.append(f"no record from rank {fc.rank}; reported by rank {fc.reported_by}")
    if fc.since_start is not None:
        context.append(f"{timefmt.seconds(fc.since_start)} s after that agent started")
    if fc.binding is not None:
        context.append(f"binding {fc.binding}" + (f" (judge {fc.judge})" if fc.judge else ""))
    if unfit:  # the node(s) the preflight found unfit, in the scheduler's words
        context.append(str(unfit.get("exclude")))
    if context:
        lines.append(_t("  (" + "; ".join(context) + ")"))
    if fc.log:
        lines.append(_t(f"  log {fc.log}:") if fc.excerpt else _t(f"  log {fc.log}: (empty or unreadable)"))
        lines += [_t(f"    | {ln}") for ln in fc.excerpt]
    if fc.ray_logs:
        lines.append(_t(f"  Ray's own logs of rank {fc.rank}: {', '.join(fc.ray_logs)}"))
    lines += [_t(f"  {ln}") for ln in collective[1:]]  # each rank's part in it, other groups
    if stack_lines:  # every node's stacks, grouped: the odd ones out first
        head, *rest = stack_lines
        lines += [_t(f"  {head}:")] + [_t(f"    {line}") for line in rest]
    return lines


def render(result: AuditResult, *, show_info: bool = True) -> str:
    """The verdict, then what ended the run (a restart the caps refused, the first cause), then the
    summaries, the cascade and the findings: whatever the summaries grow to, the first cause stays
    in the first lines (tests/harness/audit_head.py holds it there for every ending)."""
    counts = {s: sum(1 for f in result.findings if f.severity == s) for s in ("error", "warning", "info")}
    lines = [_t(f"gym-audit: {result.verdict.upper()} — run {result.outcome} — {result.run_dir}")]
    # A restart the caps refused is why the run stopped now: said before the attempts' causes.
    lines += [_t(f"  restarts stopped ({f.code}): {f.message}") for f in result.findings if f.code == REFUSED]
    if result.first_cause is not None:
        lines += _first_cause_lines(result.first_cause, result.unfit, result.stacks, result.collectives) + [""]
    elif result.unfit:
        lines.append(_t(f"  unfit node(s): {result.unfit.get('exclude')}"))
    lines.append(f"  {counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info")
    plan = result.plan or {}
    if plan:
        lines.append(
            f"  plan ({plan.get('source')}): {plan.get('replicas')} replicas × "
            f"{plan.get('gpus_per_replica')} GPUs,"
            f" driver on node {plan.get('driver_node')}, {len(plan.get('bindings') or {})} binding(s)"
        )
    if len(result.attempts) > 1:
        lines += ["", f"Attempts ({len(result.attempts)}; the run is judged by the last):"]
        for a in result.attempts:
            cause = f" — first cause: {cause_headline(a.first_cause)}" if a.first_cause is not None else ""
            lines.append(_t(f"  attempt {a.attempt}: {a.verdict.upper()}, run {a.outcome}{_entered(a)}{cause}"))
    lines += [_t(f"  {describe_filesystem(m)}") for m in result.filesystem]
    if result.doorbell is not None:
        lines.append(_t(f"  {describe_doorbell(result.doorbell)}"))
    lines += _training_lines(result.training) + _reply_lines(result.judge_replies)
    lines += _gateway_lines(result.judge_gateways)
    if result.ray_startup:
        lines += [_t(x) for x in describe_ray_startup(result.ray_startup)]
    if result.cascade:
        lines += ["", "Cascade (in time order):"]
        lines += [f"  {i}. {_cause_line(c)}" for i, c in enumerate(result.cascade, 1)]
    shown = [f for f in result.findings if show_info or f.severity != "info"]
    if shown:
        lines += ["", "Findings:"]
        lines += [_finding_line(f) for f in shown]
    if result.notes:
        lines += ["", "Notes:"] + [_t(f"  - {n}") for n in result.notes]
    return "\n".join(lines) + "\n"
