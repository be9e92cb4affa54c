"""The scheduler ended the job: find its own words, and make them the first cause.

When a scheduler ends a job (walltime, a cancel, a failed node, a preemption) every rank gets
SIGTERM at about the same instant and no rank failed: the failure records only say whose signal
came first. What the scheduler said it did is read from the job's output in the run directory
(launch/backends/slurm/ending.py: slurmstepd's words), else asked of the scheduler
(audit/_scheduler_query.py).

The ending replaces the first cause only when no rank failed for a reason of its own before the
scheduler's signals arrived: a rank that crashed first stays the first cause even if someone
cancelled the job after it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from audit._first_cause import signal_like
from audit._load import LoadedRun
from audit._model import Cause
from audit._views import AddressRec
from audit.safedir import SafeDir, UnsafeFile
from schemas import FailureKind, names

if TYPE_CHECKING:  # the Slurm output's reader loads for a run that has a job output (issue 51 item 9)
    from audit._views import FailureRec
    from launch.backends.answers import SchedulerEnding
    from schemas.records import SubmissionRecord

__all__ = [
    "as_first_cause",
    "backend_of",
    "explains",
    "find_ending",
    "job_id_of",
    "job_outputs",
    "restart_of",
]

# Slurm's timestamps have one-second resolution, and the agents' records come from other hosts'
# clocks: a rank's own failure counts as earlier than the scheduler's signals only by more than this.
EARLIER_BY_S = 1.0

# Records that a scheduler's ending explains: every rank's signal, its peers' reactions, a rank
# that vanished with its node.
_EXPLAINED = {
    FailureKind.SIGNAL,
    FailureKind.PEER_FAILURE,
    FailureKind.PEER_SILENT,
    FailureKind.STARTUP_TIMEOUT,
    FailureKind.AGENT_DIED,
    "silent",
}


def job_outputs(run: LoadedRun) -> list[tuple[int, str]]:
    """The run directory's Slurm job outputs, (job id, file), by job id."""
    return sorted((job, relpath) for relpath in run.others if (job := names.slurm_output_job(relpath)) is not None)


def find_ending(
    safe: SafeDir, outputs: list[tuple[int, str]], job_id: str | None, restart: int | None = None
) -> SchedulerEnding | None:
    """The ending in the output of `job_id` (the submission's job), else of the newest job, for
    the job's start `restart` (an attempt's agents record it; None: the last start)."""
    chosen = [p for j, p in outputs if job_id is not None and str(j) == job_id] or [p for _, p in outputs[-1:]]
    if not chosen:
        return None  # no job output: its reader is not loaded
    from audit._logs import read_tail
    from launch.backends.slurm.ending import TAIL_BYTES, parse_slurm_output

    try:
        lines = read_tail(safe, chosen[0], TAIL_BYTES)
    except (UnsafeFile, OSError):
        return None
    return parse_slurm_output(lines, chosen[0], restart)


def restart_of(addresses: Mapping[int, AddressRec]) -> int | None:
    """The Slurm restart count this attempt's agents ran under (they agree: one start of the job)."""
    counts = {a.job.restart for a in addresses.values() if a.job is not None and a.job.restart is not None}
    return counts.pop() if len(counts) == 1 else None


def _rank_on(host: str | None, addresses: Mapping[int, AddressRec]) -> int | None:
    if host is None:
        return None
    for rank, addr in sorted(addresses.items()):
        if addr.hostname == host or (addr.hostname or "").split(".")[0] == host:
            return rank
        if addr.job is not None and addr.job.node == host:  # the scheduler's own node name
            return rank
    return None


def _senders(failures: Mapping[int, FailureRec]) -> list[str]:
    return sorted({rec.sender for rec in failures.values() if rec.kind == FailureKind.SIGNAL and rec.sender})


def explains(first: Cause, rest: Iterable[Cause]) -> bool:
    """True when no rank failed for a reason of its own before the scheduler's signals: then a
    scheduler's ending, where there is one, is the first cause."""
    causes = [first, *rest]
    signalled = [c.wall_time for c in causes if signal_like(c) and c.wall_time is not None]
    t_signal = min(signalled) if signalled else None
    for c in causes:
        if c.kind in _EXPLAINED or signal_like(c):
            continue
        # A rank's own failure: after the scheduler's signals it is their consequence (a driver that
        # exits 1 on SIGTERM); before them, or with no signal seen at all, it is the cause.
        if t_signal is None or c.wall_time is None or c.wall_time < t_signal - EARLIER_BY_S:
            return False
    return True


def as_first_cause(
    ending: SchedulerEnding,
    first: Cause,
    rest: Iterable[Cause],
    failures: Mapping[int, FailureRec],
    addresses: Mapping[int, AddressRec],
    backend: str = "slurm",
) -> Cause:
    """The ending as the run's first cause, in the scheduler's words, with the evidence it rests on."""
    causes = [first, *rest]
    times = [c.wall_time for c in causes if c.wall_time is not None]
    node_rank = _rank_on(ending.node, addresses)
    rank = node_rank if node_rank is not None else _rank_on(ending.host, addresses)
    text = f"{backend} ended job {ending.job_id}: {ending.label}"
    if ending.node:
        text += f" (node {ending.node}" + (f", rank {node_rank})" if node_rank is not None else ")")
    text += f": {ending.words}"
    senders = _senders(failures)
    if senders:
        text += f"; every rank's SIGTERM came from {', '.join(senders)}"
    return Cause(
        rank=rank if rank is not None else first.rank,
        kind=str(ending.kind),
        phase=first.phase,
        cause=text,
        wall_time=min(times) if times else None,
        since_start=None,
        file=ending.file,
        log=ending.file,
        excerpt=(ending.words,),
        scheduler=backend,
    )


def _submission(run: LoadedRun) -> SubmissionRecord | None:
    doc = run.doc(names.SUBMISSION)
    if doc is None:
        return None  # a run gym-launch did not submit: the record's type is not loaded (issue 51 item 9)
    from schemas.records import SubmissionRecord

    return SubmissionRecord.from_json(doc)


def job_id_of(run: LoadedRun) -> str | None:
    rec = _submission(run)
    return rec.job_id if rec is not None else None


def backend_of(run: LoadedRun) -> str | None:
    rec = _submission(run)
    return rec.backend if rec is not None else None
