"""Cross-checks of the run's lifecycle: phases, completion and acknowledgements, cleanup,
the driver's own evidence of training, expected logs, and incarnation consistency."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from audit._context import AuditContext
from audit._model import Finding, Severity
from audit._training_evidence import ACCEPTED, TrainingEvidence, thin
from audit._views import rank_of, ranks_of
from schemas import AgentState, Phase, PhaseOutcome, RunOutcome, WriterKind, names
from schemas.lenient import ABSENT
from schemas.records import CleanupRecord, DriverResultRecord
from schemas.vocab import FsCondition

__all__ = [
    "check_cleanup",
    "check_completion",
    "check_driver",
    "check_failures_vs_success",
    "check_heartbeats",
    "check_incarnations",
    "check_logs",
    "check_phases",
    "check_shared_filesystem",
    "training_summary",
]


def check_phases(ctx: AuditContext) -> list[Finding]:
    out: list[Finding] = []
    # Read once, not per rank and span: an enum member's lookup costs ~4 times the comparison.
    succeeded, done, ok = ctx.succeeded, AgentState.SUCCEEDED, PhaseOutcome.OK
    for rank, rec in sorted(ctx.phases.items()):
        f = rec.relpath
        if succeeded:
            if rec.state != done:
                out.append(Finding("error", "phases.state", f"final state {rec.state!r} on a successful run", f, rank))
            for span in rec.spans:
                if span.outcome != ok:
                    out.append(Finding("error", "phases.not_ok", f"phase {span.phase} ended {span.outcome!r}", f, rank))
        prev = None
        for span in rec.spans:
            if span.ended_at is not None and span.ended_at < span.started_at:
                out.append(
                    Finding("warning", "phases.time_order", f"phase {span.phase} ends before it starts", f, rank)
                )
            if prev is not None and span.started_at < prev:
                out.append(
                    Finding(
                        "warning",
                        "phases.time_order",
                        f"phase {span.phase} starts before the previous one",
                        f,
                        rank,
                    )
                )
            prev = span.started_at
    return out


def check_completion(ctx: AuditContext) -> list[Finding]:
    out: list[Finding] = []
    f = names.COMPLETE
    acked = ctx.acked & set(ctx.expected_ranks)
    if ctx.complete is None:
        if acked:
            out.append(
                Finding(
                    "error",
                    "complete.ack_without_complete",
                    f"ranks {sorted(acked)} acknowledged completion, but complete.json does not exist",
                    f,
                )
            )
        return out
    missing = sorted(set(ctx.expected_ranks) - ctx.acked)
    if missing:
        # After complete.json a replica may still fail (e.g. during acknowledgement); then missing
        # acks are part of that failure, not a separate protocol violation.
        sev: Severity = "warning" if ctx.failures else "error"
        out.append(
            Finding(
                sev,
                "complete.missing_acks",
                f"complete.json exists but ranks {missing} never acknowledged",
                f,
            )
        )
    driver_rank = ctx.complete.driver_rank
    node = ctx.plan.driver_node
    want = ctx.owner_of_node.get(node) if node is not None else None
    if driver_rank is not None and want is not None and driver_rank != want:
        out.append(
            Finding(
                "error",
                "complete.driver_rank",
                f"driver ran on rank {driver_rank}, but the plan puts it on node {node} (rank {want})",
                f,
                json_path="$.driver_rank",
            )
        )
    return out


def check_cleanup(ctx: AuditContext) -> list[Finding]:
    out: list[Finding] = []
    present = ranks_of(ctx.run, "cleanup")
    for rank in ctx.expected_ranks:
        if rank not in present:
            out.append(
                Finding(
                    "error",
                    "cleanup.missing",
                    "no cleanup record: nobody can tell whether its processes (and GPU memory) were released",
                    names.cleanup(rank),
                    rank,
                )
            )
            continue
        rec = ctx.cleanups.get(rank)
        if rec is not None:
            out += _cleanup_record(ctx, rank, rec)
    return out


def _cleanup_record(ctx: AuditContext, rank: int, rec: CleanupRecord) -> list[Finding]:
    """One rank's cleanup record: who wrote it, its outcome, what survived, what was killed."""
    f = names.cleanup(rank)
    out: list[Finding] = []
    if rec.writer == WriterKind.REAPER:
        out.append(Finding("info", "cleanup.by_reaper", "written by the reaper: the agent itself was killed", f, rank))
    out += _cleanup_outcome(ctx, rank, rec.outcome)
    leftover = list(rec.leftover_pids)
    if leftover:
        out.append(
            Finding(
                "error",
                "cleanup.leftover",
                f"processes {leftover[:10]} survived teardown (orphans keep GPU memory)",
                f,
                rank,
                "$.leftover_pids",
            )
        )
    for i, g in enumerate(rec.groups):
        if g.get("how") == "sigkill":
            text = f"group {g.get('name')!r} ignored SIGTERM and was killed"
            out.append(Finding("info", "cleanup.sigkill", text, f, rank, f"$.groups[{i}]"))
    return out


def _cleanup_outcome(ctx: AuditContext, rank: int, outcome: str | None) -> list[Finding]:
    """`outcome` is how this replica ended (not whether teardown worked: leftover_pids says that)."""
    f = names.cleanup(rank)
    if outcome == RunOutcome.FAILURE and ctx.succeeded:
        return [
            Finding("error", "cleanup.outcome_mismatch", "says failure on a run that succeeded", f, rank, "$.outcome")
        ]
    if outcome == RunOutcome.SUCCESS and rank in ctx.failures:
        return [
            Finding(
                "error",
                "cleanup.outcome_mismatch",
                "says success, but the rank wrote a failure record",
                f,
                rank,
                "$.outcome",
            )
        ]
    if outcome == RunOutcome.FAILURE and not ctx.failures:
        return [
            Finding(
                "warning",
                "cleanup.failure_without_record",
                "says failure, but no rank wrote a failure record",
                f,
                rank,
                "$.outcome",
            )
        ]
    return []


def _finite(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _training_required(ctx: AuditContext) -> str | None:
    """Why no evidence of training is expected, or None when it is."""
    if ctx.run.doc(names.REGRADE) is not None:
        return "a judge-only job (gym-launch regrade) grades saved answers; it trains nothing"
    return ctx.plan.no_training


def training_summary(ctx: AuditContext) -> dict[str, Any]:
    """The report's account of the evidence of training: where it came from and what it showed."""
    doc = _driver_result_record(ctx)
    why_not = _training_required(ctx)
    ev = ctx.training
    if doc is not None:
        source = "driver-result"
    elif why_not is not None:
        source = "not_required"
    elif ev.declared:
        source = "evidence"
    else:
        source = "none"
    return {
        "required": why_not is None,
        "not_required_because": why_not,
        "source": source,
        "driver_result": doc is not None,
        "optimizer_steps": doc.optimizer_steps if doc is not None else (ev.steps if ev.declared else None),
        "policy_refreshes": doc.policy_refreshes
        if doc is not None
        else (ev.refreshes if ev.declared and ev.refresh_checkable else None),
        "evidence": {
            "declared": ev.declared,
            "sources": [r.to_json() for r in ev.sources],
            # The trainer's replay and rollout records (seed 000), null when it wrote none.
            "replay_routes": ev.replay,
            "rollout_diagnostics": ev.rollouts,
        },
        # "none": the spec says the trainer has no separate policy refresh; "required": one must show.
        "refresh": "none" if _refresh_none(ctx) else "required",
        "series": _training_series(doc, ev),
    }


def _training_series(doc: DriverResultRecord | None, ev: TrainingEvidence) -> dict[str, Any] | None:
    """Loss per step and the refreshes, for the HTML report's chart: driver-result.json's `losses`
    (one per step), else the declared source that showed the most steps with a loss."""
    if doc is not None:
        losses = [x for x in doc.losses if _finite(x)]
        if losses:
            points = thin([(float(i), float(x)) for i, x in enumerate(losses, 1)])
            return {"source": names.DRIVER_RESULT, "points": [list(p) for p in points], "refresh_at": []}
        return None
    best = max(ev.sources, key=lambda r: len(r.series), default=None)
    if best is None or not (best.series or best.refresh_at):
        return None
    return {"source": best.source, "points": [list(p) for p in best.series], "refresh_at": list(best.refresh_at)}


def check_driver(ctx: AuditContext) -> list[Finding]:
    """Process exit alone is not success: the driver must show it trained, in driver-result.json
    or in the trainer's own records the spec declares ([driver.evidence])."""
    doc = _driver_result_record(ctx)
    finished = ctx.complete is not None or ctx.succeeded
    out = _evidence_findings(ctx) if doc is not None or finished else []
    why_not = _training_required(ctx)
    if why_not is not None:
        if finished:
            out.append(Finding("info", "driver.training_not_required", f"no evidence of training required: {why_not}"))
            if ctx.plan.evaluation:  # judged by its exit and by what its judges answered
                out += _judge_replies_shown(ctx)
        return out
    if doc is None:
        if finished:
            out += _declared_evidence(ctx)
        return out
    return out + _driver_result(ctx, doc)


def _evidence_findings(ctx: AuditContext) -> list[Finding]:
    """What the declared records show wrong whoever else speaks for the driver: a trainer's own
    non-finite loss is one even when driver-result.json says otherwise."""
    out: list[Finding] = []
    for src in ctx.training.sources:
        if src.nonfinite:
            out.append(
                Finding(
                    "error",
                    "driver.nonfinite_loss",
                    f"loss not finite at {', '.join(src.nonfinite[:5])}",
                    src.files[0] if src.files else None,
                )
            )
        for gap in src.gaps:
            where = src.files[0] if src.files else None
            out.append(Finding("warning", "driver.evidence_gaps", f"{gap} (a record lost or not yet written)", where))
    return out


def _refresh_none(ctx: AuditContext) -> bool:
    """The spec says the trainer has no separate policy refresh (`[driver.evidence] refresh = "none"`)."""
    return ctx.plan.evidence is not None and ctx.plan.evidence.refresh_none


_REFRESH_NONE = Finding(
    "info",
    "driver.refresh_none",
    '[driver.evidence] refresh = "none": the spec says the trainer has no separate policy refresh (a colocated '
    "single-node run), so none is required; steps and losses are",
)


def _declared_evidence(ctx: AuditContext) -> list[Finding]:
    ev = ctx.training
    f = names.DRIVER_RESULT
    if not ev.declared:
        return [
            Finding(
                "error",
                "driver.no_result",
                "the driver exited 0 without evidence of training: no driver-result.json and no [driver.evidence] "
                f"declared. Accepted: {ACCEPTED}",
                f,
            )
        ]
    out: list[Finding] = []
    first_file = next((s.files[0] for s in ev.sources if s.files), None)
    if ev.steps <= 0:
        looked = "; ".join(s.missing for s in ev.sources if s.missing) or "no optimizer step"
        out.append(
            Finding(
                "error",
                "driver.no_steps",
                f"the declared evidence of training shows no optimizer step ({looked}), and there is no "
                f"driver-result.json. Accepted: {ACCEPTED}",
                first_file,
            )
        )
    else:  # (without a step there is nothing to refresh, and no loss to check)
        if _refresh_none(ctx):
            out.append(_REFRESH_NONE)
        elif ev.refreshes < 1:
            shown = "" if ev.refresh_checkable else " (no declared source can show one)"
            out.append(
                Finding(
                    "error",
                    "driver.no_policy_refresh",
                    f"the declared evidence shows {ev.steps} optimizer step(s) but no policy refresh{shown}: "
                    "rollouts never saw new weights",
                    first_file,
                )
            )
        if not any(s.losses for s in ev.sources):
            out.append(
                Finding(
                    "error",
                    "driver.no_losses",
                    f"the declared evidence shows {ev.steps} optimizer step(s) but no loss value, so nothing shows "
                    "the losses finite (seed 000): the trainer must write its loss where [driver.evidence] looks "
                    "(loss_field, a `loss` group in log_step_pattern, or the MILES records' local_policy_objective)",
                    first_file,
                )
            )
    return out + _judge_replies_shown(ctx)


def _judge_replies_shown(ctx: AuditContext) -> list[Finding]:
    """A spec that binds judges needs a judge reply to the driver, counted independently of its claim."""
    independent = ctx.replies.independent if ctx.replies is not None else None
    if not ctx.plan.bindings or independent:
        return []
    why = " (none of the bound judges could be counted)" if independent is None else ""
    return [
        Finding(
            "error",
            "driver.no_judge_replies",
            "the spec binds judges, but no judge reply to the driver shows in the judges' own request logs "
            f"(judge-NAME-RANK.log, less the canaries) or in grades-RANK.jsonl{why}",
        )
    ]


def _driver_result_record(ctx: AuditContext) -> DriverResultRecord | None:
    return DriverResultRecord.from_json(ctx.run.doc(names.DRIVER_RESULT))


def _driver_result(ctx: AuditContext, doc: DriverResultRecord) -> list[Finding]:
    f = names.DRIVER_RESULT
    out: list[Finding] = []
    steps = doc.optimizer_steps_as_written
    if not ((n := doc.optimizer_steps) is not None and n > 0):
        out.append(
            Finding(
                "error",
                "driver.no_steps",
                f"optimizer_steps is {steps!r}, not > 0",
                f,
                json_path="$.optimizer_steps",
            )
        )
    bad = [i for i, x in enumerate(doc.losses) if not _finite(x)]
    if bad or (doc.final_loss is not ABSENT and not _finite(doc.final_loss)):
        where = f"losses at steps {bad[:5]}" if bad else "final_loss"
        out.append(Finding("error", "driver.nonfinite_loss", f"{where} not finite", f, json_path="$.losses"))
    refreshes = doc.policy_refreshes_as_written
    if _refresh_none(ctx):
        out.append(_REFRESH_NONE)
    elif not ((n := doc.policy_refreshes) is not None and n >= 1):
        out.append(
            Finding(
                "error",
                "driver.no_policy_refresh",
                f"policy_refreshes is {refreshes!r}: rollouts never saw new weights",
                f,
                json_path="$.policy_refreshes",
            )
        )
    replies = doc.judge_replies_as_written
    if ctx.plan.bindings and not ((n := doc.judge_replies) is not None and n > 0):
        out.append(
            Finding(
                "error",
                "driver.no_judge_replies",
                f"judge_replies is {replies!r} although the spec binds judges",
                f,
                json_path="$.judge_replies",
            )
        )
    if doc.writer not in (None, WriterKind.DRIVER):
        out.append(Finding("warning", "driver.writer", f"written by {doc.writer!r}, not the driver", f))
    return out


def check_failures_vs_success(ctx: AuditContext) -> list[Finding]:
    """Failure records on a run whose completion records look complete."""
    if ctx.failures and ctx.complete is not None and set(ctx.expected_ranks) <= ctx.acked:
        return [
            Finding(
                "error",
                "failure.after_complete",
                f"complete.json and every ack exist, yet ranks {sorted(ctx.failures)} wrote failure records",
                names.FAILURES_DIR,
            )
        ]
    return []


def check_logs(ctx: AuditContext) -> list[Finding]:
    out: list[Finding] = []
    logs = ctx.run.logs
    node = ctx.plan.driver_node
    driver_rank = ctx.complete.driver_rank if ctx.complete is not None else None
    if driver_rank is None and node is not None:
        driver_rank = ctx.owner_of_node.get(node)
    if driver_rank is not None:
        expected = ctx.complete is not None or ctx.phase_started(driver_rank, Phase.DRIVER)
        if expected and names.driver_log(driver_rank) not in logs:
            out.append(
                Finding(
                    "error",
                    "log.missing",
                    "the driver's log is missing",
                    names.driver_log(driver_rank),
                    driver_rank,
                )
            )
    for art in ctx.run.by_schema("judge-endpoint"):
        rank = rank_of(art)
        if art.judge and rank is not None and names.judge_log(art.judge, rank) not in logs:
            out.append(
                Finding(
                    "error",
                    "log.missing",
                    f"judge {art.judge!r}'s log is missing",
                    names.judge_log(art.judge, rank),
                    rank,
                )
            )
    for rank, rec in sorted(ctx.failures.items()):
        if rec.log and rec.log not in logs:
            out.append(
                Finding(
                    "warning",
                    "log.missing_named",
                    f"the failure record names log {rec.log!r}, which is not in the run directory",
                    rec.relpath,
                    rank,
                    "$.log",
                )
            )
    return out


def check_heartbeats(ctx: AuditContext) -> list[Finding]:
    out = _corrupt_heartbeats(ctx)
    have = {rank_of(a) for a in ctx.run.by_schema("heartbeat")}
    if not ctx.succeeded:
        return out
    return out + [
        Finding("warning", "heartbeat.missing", "no heartbeat record", names.heartbeat(r), r)
        for r in ctx.expected_ranks
        if r not in have
    ]


def _corrupt_heartbeats(ctx: AuditContext) -> list[Finding]:
    """A rank's heartbeat file that its watchers read as bytes no agent writes (cleanup records'
    `corrupt_heartbeats`): another writer in the run directory, or storage that corrupts files."""
    seen: dict[int, dict[int, int]] = {}  # watched rank -> {watcher: reads}
    for watcher, rec in ctx.cleanups.items():
        for rank, n in rec.corrupt_heartbeats.items():
            if str(rank).isdigit() and isinstance(n, int):
                seen.setdefault(int(rank), {})[watcher] = n
    return [
        Finding(
            "warning",
            "heartbeat.corrupt",
            f"rank {rank}'s heartbeat file read {sum(by.values())} time(s) as bytes no agent writes "
            f"(seen by rank(s) {', '.join(map(str, sorted(by)))}): another process writes into the run "
            "directory, or its storage corrupts files; while it did, the file counted as still",
            names.heartbeat(rank),
            rank,
        )
        for rank, by in sorted(seen.items())
    ]


def check_incarnations(ctx: AuditContext) -> list[Finding]:
    """All of one rank's records should come from one agent process; a second incarnation means a
    restart or stale files from an earlier attempt mixed into this run."""
    out: list[Finding] = []
    seen: dict[int, set[str]] = defaultdict(set)
    ours = {str(WriterKind.AGENT), str(WriterKind.REAPER)}  # plain strings: one hash per record
    for art in ctx.run.artifacts.values():
        doc = art.doc
        if art.file_rank is None or doc is None:
            continue
        # The type tests in place of as_str: asked of every record of every rank.
        writer, inc = doc.get("writer"), doc.get("incarnation")
        if isinstance(writer, str) and writer in ours and isinstance(inc, str) and inc:
            seen[art.file_rank].add(inc)
    for rank, incs in sorted(seen.items()):
        if len(incs) > 1:
            out.append(
                Finding(
                    "warning",
                    "rank.incarnations",
                    f"records from {len(incs)} incarnations ({', '.join(sorted(incs))}): a restart or stale files",
                    None,
                    rank,
                )
            )
    for rank, rec in sorted(ctx.failures.items()):
        target = ctx.failures.get(rec.reacting_to) if rec.reacting_to is not None else None
        if (
            target
            and rec.reacting_to_incarnation
            and target.incarnation
            and rec.reacting_to_incarnation != target.incarnation
        ):
            out.append(
                Finding(
                    "warning",
                    "failure.stale_reaction",
                    f"reacts to rank {rec.reacting_to} incarnation {rec.reacting_to_incarnation}, "
                    f"but that rank's failure record is from incarnation {target.incarnation}",
                    rec.relpath,
                    rank,
                    "$.reacting_to",
                )
            )
    return out


def check_shared_filesystem(ctx: AuditContext) -> list[Finding]:
    """Name a full or unwritable run directory as such, not as the silence it causes."""
    conditions = {str(c) for c in FsCondition}
    hit = {r: rec for r, rec in sorted(ctx.failures.items()) if rec.fs_condition in conditions}
    if not hit:
        return []
    full = any(rec.fs_condition == FsCondition.FULL for rec in hit.values())
    what = f"shared filesystem {FsCondition.FULL if full else FsCondition.UNWRITABLE}"
    first = next(iter(hit.values()))
    return [
        Finding(
            "error",
            "run_dir.unwritable",
            f"{what}: ranks {sorted(hit)} could not write to the run directory ({first.cause[:200]}); "
            "records may be missing here (each node kept refused ones in its local temp dir)",
            first.relpath,
            first.rank,
        )
    ]
