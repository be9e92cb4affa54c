"""Name the first cause of a failed run, and order everything else as its cascade.

Rules (the agent's failure records are the evidence):
- a record with `reacting_to` null is a root cause;
- a record reacting to rank X is a reaction when X has a failure record of its own (of the
  incarnation it reacted to, when it names one);
- a `peer_silent` record about X where X has NO record makes X the culprit: X died without
  a word (host lost, SIGKILL with no reaper), so the cause is placed on X, reported by the
  observer; a `peer_failure` about X where X has NO record (it was rung on the doorbell and X's
  own record was lost, e.g. with its hung filesystem) is placed on X with the kind the reaction
  names, reported by the observer; any other reaction whose target left no record is a root;
- a signal (SIGTERM from a scheduler propagating a failure), or a driver/child killed by one, is not
  the first cause when another rank's real failure was recorded within SCHEDULER_REACTION_S after it;
- among several roots the earliest wall time wins, ties broken by kind (a crash of a child or
  the agent explains a later signal or timeout better than the other way round). Wall times
  come from different hosts whose clocks may differ, so the order across hosts is best effort;
- a `peer_silent` record about X written more than LATE_RECORD_S before X's own record (X was
  frozen, SIGSTOPped or stalled, and wrote, or its reaper wrote, only after it resumed) reacted to
  X's silence, not to that record: X silent is the cause, at the time it was noticed, and X's late
  record is in the cascade (by time), not a cause of its own;
- a hang on the driver's node explains the other nodes' time_limit records of the same walltime
  warning (a run stuck when the warning came is a hang);
- when no record is a root (reactions in a cycle), the earliest record is the first cause and
  its text says so: the audit never fails to report what it has.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from audit._model import Cause, Sender
from audit._ray_evidence import ray_evidence
from audit._views import PhasesRec
from audit.safedir import SafeDir
from schemas import FailureKind, Phase, names

if TYPE_CHECKING:
    from audit._views import FailureRec

__all__ = [
    "JUDGE_KINDS",
    "JUDGE_PHASES",
    "KIND_PRIORITY",
    "LATE_RECORD_S",
    "REACTION_KINDS",
    "SCHEDULER_REACTION_S",
    "SIGNALLED_EXIT_CODES",
    "analyse",
    "order_key",
    "signal_like",
]

# Lower is a likelier first cause when wall times tie (every FailureKind has one: a test checks).
KIND_PRIORITY: dict[str, int] = {
    FailureKind.TIME_LIMIT: 0,  # the scheduler's ending explains every rank's signal
    FailureKind.CANCELLED: 0,
    FailureKind.NODE_FAILURE: 0,
    FailureKind.PREEMPTED: 0,
    FailureKind.AGENT_DIED: 0,
    FailureKind.CHILD_EXIT: 1,
    FailureKind.JUDGE_DEGRADED: 1,  # explains the driver's exit (it raised) or the agent stopping it
    FailureKind.DRIVER_EXIT: 2,
    FailureKind.HANG: 2,  # the driver's node called it: no progress for progress_timeout
    FailureKind.JUDGE_HEALTH: 3,
    FailureKind.CANARY: 4,
    FailureKind.JUDGE: 5,
    FailureKind.LAYOUT: 6,
    FailureKind.PLAN_MISMATCH: 7,
    FailureKind.ADDRESS_CONFLICT: 8,
    FailureKind.PLACEMENT: 9,
    FailureKind.PREFLIGHT: 9,  # a node unfit to run: explains its peers' reactions
    FailureKind.ENVIRONMENT: 9,  # the job lacks a variable the spec references: before any process
    FailureKind.DATA: 10,
    FailureKind.RUN_DIR: 10,
    FailureKind.FS_STALL: 10,  # the shared filesystem, not a rank: ties with run_dir
    FailureKind.PORTS: 10,
    FailureKind.INTERNAL: 11,
    FailureKind.PEER_SILENT: 12,
    FailureKind.ACK_TIMEOUT: 13,
    FailureKind.SIGNAL: 20,
    FailureKind.STARTUP_TIMEOUT: 21,
    FailureKind.PEER_FAILURE: 30,
}


# A scheduler that propagates a failure by signalling every task (Slurm's --kill-on-bad-exit,
# Beaker) makes the signal records of healthy ranks land before the failed rank's own record
# (its reaper needs a moment). A signal is taken as that reaction when a real failure of another
# rank was recorded within this many seconds after it.
SCHEDULER_REACTION_S = 10.0
# A dead agent's reaper writes its record within a second or two, long before a peer calls it
# silent (beacon_timeout, 30 s by default): a record this much later than the silence report was
# written after the rank resumed.
LATE_RECORD_S = 10.0
REACTION_KINDS = {FailureKind.SIGNAL, FailureKind.STARTUP_TIMEOUT, FailureKind.PEER_FAILURE, FailureKind.PEER_SILENT}

JUDGE_KINDS = {FailureKind.JUDGE_HEALTH, FailureKind.JUDGE, FailureKind.CANARY, FailureKind.JUDGE_DEGRADED}
JUDGE_PHASES = {Phase.JUDGES_START, Phase.JUDGE_HEALTH}


def _priority(kind: str) -> int:
    return KIND_PRIORITY.get(kind, 15)


def order_key(c: Cause) -> tuple[float, int, int]:
    return (c.wall_time if c.wall_time is not None else float("inf"), _priority(c.kind), c.rank)


def _default_log(kind: str, rank: int, phase: str | None, logs: Mapping[str, int], judge: str | None) -> str | None:
    """The most relevant log when the record names none."""
    candidates: list[str] = []
    if kind == FailureKind.DRIVER_EXIT or phase == Phase.DRIVER:
        candidates.append(names.driver_log(rank))
    if kind in JUDGE_KINDS or phase in JUDGE_PHASES:
        judge_logs = {}
        for p in logs:
            parsed = names.parse(p)
            if parsed and parsed.schema == "log" and parsed.judge and parsed.rank == rank:
                judge_logs[p] = parsed.judge
        # Prefer the judge the record names.
        candidates.extend(sorted(judge_logs, key=lambda p: (judge_logs[p] != judge, p)))
    candidates.append(names.agent_log(rank))
    return next((c for c in candidates if c in logs), None)


def _from_record(rec: FailureRec) -> Cause:
    return Cause(
        rank=rec.rank,
        kind=rec.kind,
        phase=rec.phase,
        cause=rec.cause,
        wall_time=rec.wall_time,
        since_start=rec.since_start,
        file=rec.relpath,
        log=rec.log,
        reacting_to=rec.reacting_to,
        writer=rec.writer,
        exit_code=rec.exit_code,
        judge=rec.judge,
        binding=rec.binding,
        child=rec.child,
        signal=rec.signal,
        sender=Sender(rec.sender_pid, rec.sender_uid, rec.sender)
        if rec.sender is not None or rec.sender_pid is not None
        else None,
        fs_condition=rec.fs_condition,
        peers=rec.peers,
        monotonic_time=rec.monotonic_time,
        incarnation=rec.incarnation,
        attempt=rec.attempt,
        reacting_to_incarnation=rec.reacting_to_incarnation,
        reacting_to_kind=rec.reacting_to_kind,
        checks=rec.checks,
        hang=rec.hang,
    )


def _silent_culprit(rec: FailureRec, phases: Mapping[int, PhasesRec], heartbeat_phase: str | None) -> Cause:
    culprit = rec.reacting_to if rec.reacting_to is not None else rec.rank
    last_phase = heartbeat_phase
    timeline = phases.get(culprit)
    if timeline and timeline.spans:
        last_phase = timeline.spans[-1].phase
    return Cause(
        rank=culprit,
        kind="silent",
        phase=last_phase,
        cause=f"rank {culprit} stopped without writing a failure record; rank {rec.rank} noticed: {rec.cause}",
        wall_time=rec.wall_time,  # when the silence was noticed: the death itself left no time
        since_start=None,  # the observer's, not the culprit's: would mislead
        file=None,
        log=None,
        reacting_to=None,
        reported_by=rec.rank,
        writer=None,
    )


def _unrecorded_culprit(rec: FailureRec) -> Cause:
    """X failed (kind K) as a peer heard on the doorbell, and X's own record never arrived."""
    culprit = rec.reacting_to if rec.reacting_to is not None else rec.rank
    return Cause(
        rank=culprit,
        kind=rec.reacting_to_kind or "unknown",
        phase=None,
        cause=f"rank {culprit} left no failure record; rank {rec.rank} heard of its failure: {rec.cause}",
        wall_time=rec.wall_time,  # when it was heard of: the culprit's own time was not recorded
        since_start=None,
        file=None,
        log=None,
        reacting_to=None,
        reported_by=rec.rank,
        writer=None,
    )


# A driver or child killed by SIGTERM, SIGINT or SIGHUP was signalled by someone else (a scheduler
# signals every process of a step): like the agent's own signal record, a reaction, not a cause.
# SIGKILL (-9) is not among them: the kernel's OOM killer sends it, and that is a real failure.
# POSIX numbers them 1, 2 and 15 everywhere: written out, the audit does not import `signal` (its
# enums cost the start-up ~0.5 ms).
SIGNALLED_EXIT_CODES = frozenset({-1, -2, -15})  # -SIGHUP, -SIGINT, -SIGTERM


def signal_like(c: Cause) -> bool:
    if c.kind == FailureKind.SIGNAL:
        return True
    return c.kind in (FailureKind.DRIVER_EXIT, FailureKind.CHILD_EXIT) and c.exit_code in SIGNALLED_EXIT_CODES


def _signals_after_real_failures(roots: list[Cause]) -> list[Cause]:
    """Move a leading signal behind a real failure of another rank recorded shortly after it."""
    first = roots[0]
    if not signal_like(first) or first.wall_time is None:
        return roots
    real = [
        c
        for c in roots
        if c.kind not in REACTION_KINDS
        and not signal_like(c)
        and c.rank != first.rank
        and c.wall_time is not None
        and c.wall_time - first.wall_time <= SCHEDULER_REACTION_S
    ]
    if not real:
        return roots
    return [real[0], *(c for c in roots if c is not real[0])]


def _hang_before_time_limit(roots: list[Cause]) -> list[Cause]:
    """A run stuck when the scheduler's walltime warning came is a hang: the driver's node calls it
    one (with every node's stacks), the other nodes stop for the warning itself (time_limit) a
    moment earlier or later. The hang is the first cause, not the time limit it ran into."""
    hang = next((c for c in roots if c.kind == FailureKind.HANG), None)
    if hang is None or hang is roots[0]:
        return roots
    before = roots[: roots.index(hang)]
    if not all(c.kind == FailureKind.TIME_LIMIT or signal_like(c) for c in before):
        return roots
    return [hang, *(c for c in roots if c is not hang)]


def _reacts_to_recorded(rec: FailureRec, failures: Mapping[int, FailureRec]) -> bool:
    """A reaction counts as one only when the record it reacts to is still there: a target whose
    record was overwritten by another incarnation (a duplicate rank) left its cause unrecorded."""
    target = failures.get(rec.reacting_to) if rec.reacting_to is not None else None
    if target is None:
        return False
    want = rec.reacting_to_incarnation
    return want is None or target.incarnation is None or want == target.incarnation


def _late_records(failures: Mapping[int, FailureRec]) -> set[int]:
    """Ranks whose own record came LATE_RECORD_S after a peer reported them silent (wall times)."""
    out = set()
    for rec in failures.values():
        target = failures.get(rec.reacting_to) if rec.reacting_to is not None else None
        if (
            rec.kind == FailureKind.PEER_SILENT
            and target is not None
            and target.rank != rec.rank
            and target.reacting_to is None
            and rec.wall_time is not None
            and target.wall_time is not None
            and target.wall_time - rec.wall_time > LATE_RECORD_S
        ):
            out.add(target.rank)
    return out


def _late_note(own: FailureRec, noticed: FailureRec) -> str:
    late = (own.wall_time or 0.0) - (noticed.wall_time or 0.0)
    return f" [its own record ({own.kind}) came {late:.0f} s later, once it resumed: {own.cause[:200]}]"


def _cycle_note(failures: Mapping[int, FailureRec]) -> str:
    """Say that no record is a root: the evidence points in a circle (or the root was lost)."""
    edges = ", ".join(f"{r}->{rec.reacting_to}" for r, rec in sorted(failures.items()))
    return (
        f" [no failure record is a root cause: every record reacts to another ({edges}); "
        "the earliest is shown, the real cause may be unrecorded]"
    )


def _hang_log_end(c: Cause, log: str) -> int | None:
    """A hang's driver log is quoted as it stood when the hang was called (hang.log_bytes): what
    the driver printed while it was being stopped is not why it hung."""
    if c.kind != FailureKind.HANG or log != names.driver_log(c.rank) or not c.hang:
        return None
    end = c.hang.get("log_bytes")
    return end if isinstance(end, int) and not isinstance(end, bool) and end >= 0 else None


def analyse(
    failures: Mapping[int, FailureRec],
    phases: Mapping[int, PhasesRec],
    heartbeat_phases: Mapping[int, str],
    safe: SafeDir | None,
    logs: Mapping[str, int],
) -> tuple[Cause | None, tuple[Cause, ...], tuple[Cause, ...]]:
    """(first cause, cascade in time order, other independent root causes)."""
    if not failures:
        return None, (), ()
    roots: list[Cause] = []
    reactions: list[Cause] = []
    silent_seen: set[int] = set()
    heard_seen: set[int] = set()
    late = _late_records(failures)
    for rank, rec in sorted(failures.items()):
        target = rec.reacting_to
        if rank in late:
            reactions.append(_from_record(rec))  # after its silence was the cause: in the cascade
        elif target is None or target == rank:
            roots.append(_from_record(rec))
        elif rec.kind == FailureKind.PEER_SILENT and target in late:
            if target not in silent_seen:
                silent_seen.add(target)
                culprit = _silent_culprit(rec, phases, heartbeat_phases.get(target))
                own = failures[target]
                roots.append(replace(culprit, cause=culprit.cause + _late_note(own, rec)))
            reactions.append(_from_record(rec))
        elif _reacts_to_recorded(rec, failures):
            reactions.append(_from_record(rec))
        elif rec.kind == FailureKind.PEER_SILENT and target not in failures:
            if target not in silent_seen:
                silent_seen.add(target)
                roots.append(_silent_culprit(rec, phases, heartbeat_phases.get(target)))
            reactions.append(_from_record(rec))
        elif rec.kind == FailureKind.PEER_FAILURE and rec.reacting_to_kind and target not in failures:
            if target not in heard_seen:
                heard_seen.add(target)
                roots.append(_unrecorded_culprit(rec))
            reactions.append(_from_record(rec))
        else:
            roots.append(_from_record(rec))  # reacts to a failure nobody recorded: best explanation left
    if not roots:
        # Every record reacts to another (a cycle: a stopped agent resumed and reacted to its
        # peers' reactions to its own silence). Still say what is known: the earliest record.
        # A peer's silence report is the likeliest start: the silent rank wrote its own record
        # only after it resumed (SIGSTOP/SIGCONT, a long stall), reacting to its peers' records.
        reactions.sort(key=order_key)
        silent = [
            (c, c.reacting_to) for c in reactions if c.kind == FailureKind.PEER_SILENT and c.reacting_to is not None
        ]
        if silent:
            noticed, target = silent[0]
            culprit = _silent_culprit(failures[noticed.rank], phases, heartbeat_phases.get(target))
            roots.append(replace(culprit, cause=culprit.cause + _cycle_note(failures)))
        else:
            earliest = reactions.pop(0)
            roots.append(replace(earliest, cause=earliest.cause + _cycle_note(failures)))
    roots.sort(key=order_key)
    roots = _hang_before_time_limit(_signals_after_real_failures(roots))
    first = roots[0]
    log = first.log or _default_log(first.kind, first.rank, first.phase, logs, first.judge)
    excerpt: tuple[str, ...] = ()
    if safe is not None and log and log in logs:
        from audit._logs import log_excerpt  # a failed run's log excerpt: a run that passed never reads one

        excerpt = log_excerpt(safe, log, _hang_log_end(first, log))
    first = replace(first, log=log, excerpt=excerpt, ray_logs=ray_evidence(first, log, logs))
    cascade = tuple(sorted(roots[1:] + reactions, key=order_key))
    return first, cascade, tuple(roots[1:])
