"""`audit_run(path) -> AuditResult`: the whole audit, for the CLI and for tests on real runs.

Reads only: nothing here opens a run-directory file for writing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from audit import _scheduler_query as scheduler_query
from audit._context import AuditContext, build_context
from audit._crosscheck_grace import check_driver_stop
from audit._crosscheck_judges import (
    check_canaries,
    check_gateways,
    check_judge_endpoints,
    check_judge_replies,
    check_registry,
)
from audit._crosscheck_layout import check_addresses, check_placements, check_ranks, check_ray_layout
from audit._crosscheck_lifecycle import (
    check_cleanup,
    check_completion,
    check_driver,
    check_failures_vs_success,
    check_heartbeats,
    check_incarnations,
    check_logs,
    check_phases,
    check_shared_filesystem,
    training_summary,
)
from audit._crosscheck_regrade import check_regrade
from audit._doorbell import summary as doorbell_summary
from audit._expected import PlanView, expected_plan
from audit._filesystem import check_filesystem, mounts
from audit._first_cause import analyse, order_key
from audit._load import LoadedRun, current_attempt, load_run
from audit._model import AttemptSummary, AuditResult, Cause, Finding, GpuCell, NodeMap, RankSummary, Verdict
from audit._ray_startup import startup_table
from audit._restarts import attempt_numbers, how_entered, refused_findings
from audit._scheduler_ending import (
    as_first_cause,
    backend_of,
    explains,
    find_ending,
    job_id_of,
    job_outputs,
    restart_of,
)
from audit._schema_check import check_schemas
from audit._training_evidence import read_evidence
from audit._views import by_rank, rank_of
from audit.preflight import check_gpu_residue, check_preflight, exclude_line, unfit_nodes
from audit.safedir import SafeDir, UnsafeFile, UnusableRunDir
from launch.spec.load import restore_key_order
from schemas import credentials, names
from schemas.lenient import as_str
from schemas.records import DriverResultRecord, HeartbeatRecord

if TYPE_CHECKING:  # the readers of a hang's stacks and of the judge gateways load only for a run that has them
    from audit._collectives import Summary as CollectivesSummary
    from audit._ledger import LedgerSummary
    from audit.stacks import Summary as StacksSummary

__all__ = ["AuditResult", "UnusableRunDir", "audit_run"]

MAX_RANKS = 100_000  # a spec asking for more replicas than this is not a run we can list

CHECKS: tuple[Callable[[AuditContext], list[Finding]], ...] = (
    check_ranks,
    check_addresses,
    check_placements,
    check_ray_layout,
    check_registry,
    check_judge_endpoints,
    check_gateways,
    check_canaries,
    check_judge_replies,
    check_phases,
    check_completion,
    check_cleanup,
    check_driver,
    check_failures_vs_success,
    check_logs,
    check_heartbeats,
    check_incarnations,
    check_shared_filesystem,
    check_regrade,
    check_driver_stop,
    check_filesystem,
    check_preflight,
    check_gpu_residue,
)


def _guarded(check: Callable[[AuditContext], list[Finding]], ctx: AuditContext) -> list[Finding]:
    # One broken check must not hide every other finding. The fuzz test asserts that this
    # never fires, so it is a seat belt, not a place where bugs go to hide.
    try:
        return check(ctx)
    except Exception as exc:  # noqa: BLE001 - reported as a finding with its type
        return [Finding("error", "audit.internal", f"check {check.__name__} failed: {type(exc).__name__}: {exc}")]


def _with_evidence(ctx: AuditContext, safe: SafeDir) -> AuditContext:
    """The context with what the trainer and the judges wrote themselves, read once."""
    rank = ctx.driver_rank
    log = names.driver_log(rank) if rank is not None else None
    training = read_evidence(safe, ctx.plan.evidence, log)
    if not (ctx.plan.bindings or ctx.plan.bound_judges):
        return dataclasses.replace(ctx, training=training)  # no judge ran: no reply to count (nor its reader)
    from audit._judge_replies import count_replies

    result = DriverResultRecord.from_json(ctx.run.doc(names.DRIVER_RESULT))
    claimed = result.judge_replies if result is not None else None
    replies = count_replies(safe, ctx.run, ctx.plan.bound_judges, ctx.plan.judge_modes, claimed)
    return dataclasses.replace(ctx, training=training, replies=replies)


def _read_spec(run: LoadedRun) -> tuple[dict[str, Any], str | None]:
    art = run.artifacts.get(names.SPEC)
    if art is None:
        why = next((f.message for f in run.findings if f.file == names.SPEC), None)
        if why:
            raise UnusableRunDir(f"spec.json {why}; the audit needs the run's resolved spec")
        raise UnusableRunDir(f"{run.path} has no spec.json: this is not a run directory (pass OUTPUT/cluster/UUID)")
    if art.doc is None:
        why = next((f.message for f in run.findings if f.file == names.SPEC), "cannot be parsed")
        raise UnusableRunDir(f"spec.json {why}; the audit needs the run's resolved spec")
    spec = art.doc.get("spec")
    if not isinstance(spec, dict):
        raise UnusableRunDir("spec.json has no `spec` object; the audit needs the run's resolved spec")
    # JSON writers sort keys: pools are laid out in declaration order, which key_order keeps.
    spec = dict(spec)
    restore_key_order(spec, art.doc.get("key_order"))
    return spec, as_str(art.doc.get("fingerprint"))


def _inferred_cause(ctx: AuditContext) -> Cause | None:
    """No failure record, but a phase ended 'failed': the earliest such phase is the best lead."""
    failed = [
        (span.ended_at or span.started_at, rank, span)
        for rank, rec in ctx.phases.items()
        for span in rec.spans
        if span.outcome == "failed"
    ]
    if not failed:
        return None
    t, rank, span = min(failed, key=lambda x: (x[0], x[1]))
    return Cause(
        rank,
        "phase_failed",
        span.phase,
        span.detail or f"phase {span.phase} failed",
        t,
        None,
        names.phases(rank),
        None,
    )


def _gpu_maps(ctx: AuditContext) -> tuple[NodeMap, ...]:
    plan = ctx.plan
    maps = []
    cells_of: dict[tuple[int, str, str], GpuCell] = {}  # the cells made so far (_cells)
    nodes = {n.index: n for n in plan.nodes}
    indices = sorted(set(nodes) | {r.node_index for r in ctx.placements.values() if r.node_index is not None})
    for index in indices[:1024]:
        rank = ctx.owner_of_node.get(index)
        rec = ctx.placements.get(rank) if rank is not None else None
        if rec is None or rec.node_index != index:
            rec = next((p for p in ctx.placements.values() if p.node_index == index), None)
        roles: dict[int, tuple[str, str]] = {}
        if rec is not None:
            source = "placement"
            ray, trainer = sorted(rec.ray_devices or ()), rec.trainer_gpus
            judges = {k: v.devices or () for k, v in rec.judges.items()}
            unused = rec.unused_devices or ()
        elif index in nodes:
            source = "plan"
            node = nodes[index]
            ray, trainer = sorted(node.ray_devices), node.trainer_gpus
            judges, unused = dict(node.judges), node.unused_devices
        else:
            continue
        for k, d in enumerate(ray):
            if trainer is None:
                roles[d] = ("ray", "ray")
            else:
                roles[d] = ("trainer", "trainer") if k < trainer else ("rollout", "rollout")
        for name, devs in sorted(judges.items()):
            for d in devs:
                roles.setdefault(d, ("judge", name))
        for d in unused:
            roles.setdefault(d, ("unused", "unused"))
        width = plan.gpus_per_replica or (max(roles, default=-1) + 1)
        width = max(0, min(width, 1024))
        cells = _cells(roles, width, cells_of)
        address = rec.address if rec is not None else None
        if address is None and rank is not None and rank in ctx.addresses:
            address = ctx.addresses[rank].address
        maps.append(
            NodeMap(
                index,
                rank if rec is None else rec.rank,
                address,
                source,  # type: ignore[arg-type]
                cells,
                is_head=bool(rec.is_head) if rec is not None else index == 0,
                is_driver_node=bool(rec.is_driver_node) if rec is not None else index == plan.driver_node,
            )
        )
    return tuple(maps)


def _cells(
    roles: dict[int, tuple[str, str]], width: int, made: dict[tuple[int, str, str], GpuCell]
) -> tuple[GpuCell, ...]:
    """A node's GPU cells. A cell is made once per device, role and label, and shared by every node
    that has it (1,024 nodes have the same few; a frozen dataclass instance costs ~0.6 us to make)."""
    out = []
    for d in range(width):
        key = (d, *roles.get(d, ("unused", "unassigned")))
        cell = made.get(key)
        if cell is None:
            cell = made[key] = GpuCell(*key)  # type: ignore[arg-type]
        out.append(cell)
    return tuple(out)


def _rank_summaries(ctx: AuditContext) -> tuple[RankSummary, ...]:
    seen = set(ctx.expected_ranks) | set(ctx.addresses) | set(ctx.phases) | set(ctx.failures)
    out = []
    for rank in sorted(seen)[:MAX_RANKS]:
        addr = ctx.addresses.get(rank)
        ph = ctx.phases.get(rank)
        out.append(
            RankSummary(
                rank=rank,
                address=addr.address if addr else None,
                hostname=addr.hostname if addr else None,
                node_index=ctx.node_of_rank.get(rank),
                state=ph.state if ph else ("FAILED" if rank in ctx.failures else None),
                incarnation=addr.incarnation if addr else None,
                phases=ph.spans if ph else (),
            )
        )
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class _JobOutputs:
    """Where the scheduler's job output is: an earlier attempt's is the run's (run-level, kept in place)."""

    safe: SafeDir
    files: list[tuple[int, str]]


def audit_run(path: str | Path, ask_scheduler: bool = True, _outputs: _JobOutputs | None = None) -> AuditResult:
    """Audit one run directory. Raises UnusableRunDir (exit 2) when there is nothing to audit.
    `ask_scheduler`: when the files leave a scheduler's ending unnamed, ask the scheduler the run
    was submitted to (bounded in time; audit/_scheduler_query.py). False: the files only."""
    with SafeDir(path) as safe, safe.cached_dirs():  # one pass: each subdirectory opened once
        run = load_run(safe)
        outputs = _outputs or _JobOutputs(safe, job_outputs(run))
        spec, fingerprint = _read_spec(run)
        plan, planned = _plan(spec, fingerprint, run)
        expected = tuple(range(plan.replicas))
        ctx = _with_evidence(build_context(run, spec, fingerprint, plan, expected), safe)
        findings = _check_findings(run, ctx, fingerprint, planned)
        causes, scheduler_note = _causes(ctx, run, safe, outputs, ask_scheduler)
        notes = [scheduler_note] if scheduler_note else []
        if plan.source != "launch":
            notes.append("the plan could not be recomputed; placement and layout were not checked against it")
        if ctx.outcome == "failed" and causes.first is not None:
            failed, failed_notes = _failed_run(causes.first, causes.cascade, causes.others)
            findings.append(failed)
            notes += failed_notes
        elif ctx.outcome == "incomplete":
            causes = dataclasses.replace(causes, first=_inferred_cause(ctx))
            findings.append(_incomplete_run(ctx, expected))
        unfit = unfit_nodes(ctx)
        findings += refused_findings(safe, Path(path))
        ledger, ledger_findings = _ledger(safe, run, ctx, Path(path)) if _outputs is None else (None, [])
        otherwise_passed = ctx.outcome == "succeeded" and not any(f.severity == "error" for f in findings)
        findings = sorted(set(findings + ledger_findings), key=Finding.sort_key)
        verdict: Verdict = "fail" if any(f.severity == "error" for f in findings) else "pass"
        first = causes.first
        if first is None and otherwise_passed and ledger is not None and ledger.first_cause is not None:
            first = _data_cause(ledger, ctx.driver_rank)
        result = AuditResult(
            run_dir=str(path),
            verdict=verdict,
            outcome=ctx.outcome,
            fingerprint=fingerprint,
            findings=tuple(findings),
            first_cause=first,
            cascade=causes.cascade if ctx.outcome == "failed" else (),
            other_roots=causes.others if ctx.outcome == "failed" else (),
            expected_ranks=expected,
            ranks=_rank_summaries(ctx),
            plan=plan.to_json(),
            gpu_maps=_gpu_maps(ctx),
            notes=tuple(notes),
            attempts=_attempts(safe, Path(path), ctx.outcome, verdict, first, ask_scheduler, outputs),
            training=training_summary(ctx),
            judge_replies=ctx.replies.to_json() if ctx.plan.bindings and ctx.replies is not None else None,
            filesystem=tuple(m.to_json() for m in mounts(run)),
            doorbell=doorbell_summary(ctx.cleanups),
            unfit=_unfit(unfit, scheduler_query.scheduler_of(backend_of(run), ctx.addresses)),
            ray_startup=startup_table(ctx),
            stacks=_stacks(run, expected),
            collectives=_collectives(run, safe, first),
            judge_gateways=_gateways(run) if ctx.plan.bindings else None,
            ledger=ledger,
        )
        # The one redaction (schemas/credentials.py) before any report: the files may come from an
        # older version or a hand, and the text, JSON and HTML reports all render this result.
        redacted: AuditResult = credentials.redact(result)
        return redacted


def _plan(spec: dict[str, Any], fingerprint: str | None, run: LoadedRun) -> tuple[PlanView, list[Finding]]:
    """The plan the spec gives, recomputed; a spec with more replicas than can be listed is audited with none."""
    plan, findings = expected_plan(spec, fingerprint, run)
    if plan.replicas > MAX_RANKS:
        findings.append(Finding("error", "spec.too_many_replicas", f"{plan.replicas} replicas; auditing none"))
        plan = dataclasses.replace(plan, replicas=0, nodes=(), driver_node=None, fingerprint=None)
    return plan, findings


def _check_findings(
    run: LoadedRun, ctx: AuditContext, fingerprint: str | None, planned: list[Finding]
) -> list[Finding]:
    """What reading the files, the plan, the schemas, the evidence and every cross-check found."""
    findings = list(run.findings) + planned + check_schemas(run, fingerprint)
    findings += [*ctx.training.findings, *(ctx.replies.findings if ctx.replies is not None else ())]
    for check in CHECKS:
        findings.extend(_guarded(check, ctx))
    return findings


@dataclasses.dataclass(frozen=True)
class _Causes:
    """The first cause, the failures that followed from it, and the independent other roots."""

    first: Cause | None
    cascade: tuple[Cause, ...]
    others: tuple[Cause, ...]


def _causes(
    ctx: AuditContext, run: LoadedRun, safe: SafeDir, outputs: _JobOutputs, ask_scheduler: bool
) -> tuple[_Causes, str | None]:
    """The first cause from the ranks' records; where the scheduler ended the job and no rank failed
    on its own before, the scheduler's ending is the first cause. The note: what asking it said."""
    heartbeat_phases = {r: beat.phase for r, beat in by_rank(run, "heartbeat", HeartbeatRecord).items() if beat.phase}
    first, cascade, others = analyse(ctx.failures, ctx.phases, heartbeat_phases, safe, run.logs)
    if first is None or not explains(first, cascade):
        return _Causes(first, cascade, others), None
    scheduler = scheduler_query.scheduler_of(backend_of(run), ctx.addresses)
    job_id = job_id_of(run) or scheduler_query.recorded_job(ctx.addresses)
    ending = find_ending(outputs.safe, outputs.files, job_id, restart_of(ctx.addresses))
    note = None
    if ending is None and ask_scheduler:
        answer = scheduler_query.ask(scheduler, job_id, (first, *cascade), ctx.addresses)
        ending, note = answer.ending, answer.note or None
    if ending is None:
        return _Causes(first, cascade, others), note
    earlier = (first, *cascade)
    first = as_first_cause(ending, first, cascade, ctx.failures, ctx.addresses, scheduler or "slurm")
    return _Causes(first, tuple(sorted(earlier, key=order_key)), ()), note


def _failed_run(first: Cause, cascade: tuple[Cause, ...], others: tuple[Cause, ...]) -> tuple[Finding, list[str]]:
    """A failed run's error finding, naming its first cause, and what to keep in mind reading it."""
    who = f"the job ({first.scheduler} ended it)" if first.scheduler else f"rank {first.rank}"
    where = who + (f" in phase {first.phase}" if first.phase else "")
    finding = Finding(
        "error", "run.failed", f"first cause: {first.kind} on {where}: {first.cause}", first.file, first.rank
    )
    notes = []
    hosts = {c.rank for c in (first, *cascade)}
    if len(hosts) > 1:
        notes.append("failure times come from different hosts' clocks; the order across hosts is best effort")
    if others:
        notes.append(
            f"{len(others)} other independent root cause(s): " + ", ".join(f"{c.kind} on rank {c.rank}" for c in others)
        )
    return finding, notes


def _incomplete_run(ctx: AuditContext, expected: tuple[int, ...]) -> Finding:
    """An incomplete run's error finding: what is missing that a completed run has."""
    missing = []
    if ctx.complete is None:
        missing.append("no complete.json")
    not_acked = sorted(set(expected) - ctx.acked)
    if not_acked:
        missing.append(f"no acknowledgement from ranks {not_acked}")
    return Finding(
        "error",
        "run.incomplete",
        "the run did not complete and nobody recorded why (" + "; ".join(missing) + ")",
    )


def _unfit(nodes: list[Any], scheduler: str | None) -> dict[str, Any] | None:
    if not nodes:
        return None
    return {"scheduler": scheduler, "nodes": [n.to_json() for n in nodes], "exclude": exclude_line(scheduler, nodes)}


def _collectives(run: Any, safe: SafeDir, first: Cause | None) -> CollectivesSummary | None:
    """Every rank's collectives-RANK.json (a hang's Flight Recorder dumps), analysed together; and
    what a failed process group said in the first cause's log."""
    docs = {r: art.doc for art in run.by_schema("collectives") if (r := rank_of(art)) is not None and art.doc}
    if not docs and first is None:
        return None  # a run that passed: neither reader is loaded (the audit's start-up stays lean)
    from audit._collective_errors import process_group_errors
    from audit._collectives import summarise

    errors = process_group_errors(safe, first.log) if first is not None else ()
    return summarise(docs, sorted(names.collectives(r) for r in docs), errors)


def _stacks(run: Any, expected: tuple[int, ...]) -> StacksSummary | None:
    """Every rank's stacks-RANK.json (a hang's; gym-launch stacks' answers, named with a request, are
    not the run's evidence), summarised across ranks."""
    docs: dict[int, dict[str, Any]] = {}
    files = []
    for art in run.by_schema("stacks"):
        rank = rank_of(art)
        if rank is None or art.doc is None or art.relpath != names.stacks(rank):
            continue
        docs[rank] = art.doc
        files.append(art.relpath)
    if not docs:
        return None
    from audit.stacks import summarise as summarise_stacks

    return summarise_stacks(docs, sorted(files), expected)


def _ledger(safe: SafeDir, run: LoadedRun, ctx: AuditContext, path: Path) -> tuple[LedgerSummary | None, list[Finding]]:
    """The sample ledger of every attempt, checked against the declared order; nothing (and no
    import of its reader) for a run without ledger files."""
    earlier = attempt_numbers(path)
    top = [rel for rel in run.streamed if names.parse(rel) is not None]
    if not top and not any(_has_ledger(safe, n) for n in earlier):
        return None, []
    from audit._ledger import check_ledger, ledger_files
    from schemas.ledger_order import ORDER_FIELD

    cfg = ctx.plan.ledger
    spec = run.doc(names.SPEC) or {}
    base = spec.get("base_dir") if isinstance(spec.get("base_dir"), str) else None
    try:  # like every check (_guarded): a bug here must not hide the other findings
        files = ledger_files(safe, top, run.attempt, earlier)
        if cfg is None:
            return check_ledger(safe, files, None)
        recorded = spec.get(ORDER_FIELD) if isinstance(spec.get(ORDER_FIELD), dict) else None
        return check_ledger(safe, files, cfg.order_path(base), cfg.shuffle_seed, recorded)
    except Exception as exc:  # noqa: BLE001 - reported as a finding with its type
        return None, [Finding("error", "audit.internal", f"the ledger check failed: {type(exc).__name__}: {exc}")]


def _has_ledger(safe: SafeDir, n: int) -> bool:
    try:
        leaves, _ = safe.list_files(names.attempt_dir(n), 10_000)
    except UnsafeFile:
        return False
    return any(names.LEDGER_RE.match(leaf) for leaf in leaves)


def _data_cause(ledger: LedgerSummary, rank: int | None) -> Cause:
    """A run that passed everything else but consumed its data wrongly: the ledger's first finding."""
    assert ledger.first_cause is not None
    code, message, file, attempt, wall_time = ledger.first_cause
    return Cause(rank or 0, code, None, message, wall_time, None, file, None, attempt=attempt)


def _gateways(run: LoadedRun) -> dict[str, Any]:
    """The judge gateways' request logs, summarised (empty without any)."""
    lines = run.jsonl_lines("judge-gateway")
    if not lines:
        return {}
    from audit._gateway_stats import gateway_summary

    return gateway_summary(line for _, line in lines)


def _attempts(
    safe: SafeDir, path: Path, outcome: Any, verdict: Any, first: Any, ask: bool, outputs: _JobOutputs
) -> tuple[AttemptSummary, ...]:
    """Earlier attempts live in attempts/N/ (same layout); each is audited on its own, the
    run is judged by the last (the top level). A run never resumed has one attempt."""
    root = path / names.ATTEMPTS_DIR
    earlier: list[AttemptSummary] = []
    for n in attempt_numbers(path):
        sub = root / str(n)
        if not (sub / names.SPEC).is_file():
            continue  # the current attempt's claim directory
        try:
            r = audit_run(sub, ask_scheduler=ask, _outputs=outputs)
        except UnusableRunDir:
            continue
        earlier.append(AttemptSummary(n, r.verdict, r.outcome, r.first_cause, *how_entered(safe, n)))
    last = current_attempt(path)
    return (*earlier, AttemptSummary(last, verdict, outcome, first, *how_entered(safe, last)))
