"""The scheduler ended the job: find its own words, and make them the first cause.

When a scheduler ends a job (walltime, a cancel, a failed node, a preemption) every rank gets
SIGTERM at about the same instant and no rank failed: the failure records only say whose signal
came first. The scheduler says what it did in the job's output, which the rendered job writes
into the run directory (names.SLURM_OUTPUT). Slurm's step daemon writes, on the batch host:

    slurmstepd-n1: error: *** JOB 1 ON n1 CANCELLED AT 2026-12-01T10:59:58 DUE TO TIME LIMIT ***
    slurmstepd-n1: error: *** JOB 2 ON n1 CANCELLED AT 2026-12-01T10:58:40 ***            (scancel)
    slurmstepd-n1: error: *** JOB 3 ON n1 CANCELLED AT ... DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***
    srun: error: Node failure on n2

(measured on Slurm 22.05; "DUE TO PREEMPTION" is the preemption spelling). The JOB line, not a STEP
line, is the job's ending: ``srun --kill-on-bad-exit`` ends only a step when a task fails, and
then the failed task is the cause.

The ending replaces the first cause only when no rank failed for a reason of its own before the
scheduler's signals arrived: a rank that crashed first stays the first cause even if someone
cancelled the job after it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from audit.first_cause import signal_like
from audit.load import LoadedRun
from audit.logs import read_tail
from audit.model import Cause
from audit.safedir import SafeDir, UnsafeFile
from audit.views import AddressRec, FailureRec
from schemas import FailureKind, names

# The job output is read from its end: the ending is among its last lines.
TAIL_BYTES = 256 * 1024
# Slurm's timestamps have one-second resolution, and the agents' records come from other hosts'
# clocks: a rank's own failure counts as earlier than the scheduler's signals only by more than this.
EARLIER_BY_S = 1.0

_JOB_OUTPUT = re.compile(r"^job-slurm-(\d+)\.out$")
_ENDING = re.compile(
    r"\*\*\* JOB (?P<job>\d+) ON (?P<host>\S+) CANCELLED AT (?P<at>\S+)"
    r"(?: DUE TO (?P<why>[A-Z][A-Z ]*?))?(?:,[^*]*)? \*\*\*"
)
_NODE_FAILURE = re.compile(r"\bNode failure on (?P<node>[^\s,]+)")
_REASONS = {
    "TIME LIMIT": FailureKind.TIME_LIMIT,
    "NODE FAILURE": FailureKind.NODE_FAILURE,
    "PREEMPTION": FailureKind.PREEMPTED,
}
LABELS = {
    FailureKind.TIME_LIMIT: "its time limit was reached",
    FailureKind.CANCELLED: "it was cancelled",
    FailureKind.NODE_FAILURE: "a node failed",
    FailureKind.PREEMPTED: "it was preempted",
}
SCHEDULER_KINDS = frozenset(LABELS)
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


@dataclass(frozen=True)
class SchedulerEnding:
    """What the scheduler said it did to the job, and where it said it."""

    kind: FailureKind
    job_id: str
    host: str  # where the scheduler wrote it (Slurm: the batch host)
    at: str  # the scheduler's own timestamp, as written
    words: str  # the scheduler's line, verbatim (asked afterwards: the command and its answer)
    file: str | None  # run-directory file; None when the scheduler was asked (audit/scheduler_query.py)
    line: int  # 1-based, within the part read (the file's tail); 0 when asked
    node: str | None = None  # node_failure: the node that failed, where the scheduler names it

    @property
    def label(self) -> str:
        return LABELS[self.kind]


_START = re.compile(re.escape(names.SLURM_START_MARKER) + r" (?P<job>\d+) start (?P<restart>\d+)\b")


def restart_section(lines: list[str], restart: int | None) -> list[tuple[int, str]]:
    """The lines (numbered) of one start of the job: a requeued job appends its next start to the
    same output, after the job script's start line. Unknown restart: the last start."""
    starts = [(n, int(m.group("restart"))) for n, line in enumerate(lines) if (m := _START.search(line))]
    numbered = list(enumerate(lines, 1))
    if not starts:
        return numbered
    chosen = [i for i, (_, r) in enumerate(starts) if r == restart] if restart is not None else [len(starts) - 1]
    if not chosen:
        return []  # that start is not in the part read
    i = chosen[-1]
    begin = starts[i][0]
    end = starts[i + 1][0] if i + 1 < len(starts) else len(lines)
    return numbered[begin:end]


def parse_slurm_output(lines: Iterable[str], file: str, restart: int | None = None) -> SchedulerEnding | None:
    """The ending of one start of the job (`restart`: Slurm's restart count; None: the last
    start) in its output, with the failed node where one is named."""
    ending: SchedulerEnding | None = None
    failed_node: str | None = None
    for n, line in restart_section(list(lines), restart):
        m = _ENDING.search(line)
        if m is not None:
            why = (m.group("why") or "").strip()
            if why == "JOB REQUEUE":
                continue  # the job requeued itself (after a walltime warning): that attempt ended already
            kind = _REASONS.get(why, FailureKind.CANCELLED)
            words = line[line.index("***") :].strip()
            ending = SchedulerEnding(kind, m.group("job"), m.group("host"), m.group("at"), words, file, n)
            continue
        f = _NODE_FAILURE.search(line)
        if f is not None:
            failed_node = f.group("node")
    if ending is not None and ending.kind is FailureKind.NODE_FAILURE and failed_node:
        ending = replace(ending, node=failed_node)
    return ending


def job_outputs(run: LoadedRun) -> list[tuple[int, str]]:
    """The run directory's Slurm job outputs, (job id, file), by job id."""
    outs = []
    for relpath in run.others:
        m = _JOB_OUTPUT.match(relpath)
        if m is not None:
            outs.append((int(m.group(1)), relpath))
    return sorted(outs)


def find_ending(
    safe: SafeDir, outputs: list[tuple[int, str]], job_id: str | None, restart: int | None = None
) -> SchedulerEnding | None:
    """The ending in the output of `job_id` (the submission's job), else of the newest job, for
    the job's start `restart` (an attempt's agents record it; None: the last start)."""
    chosen = [p for j, p in outputs if job_id is not None and str(j) == job_id] or [p for _, p in outputs[-1:]]
    for relpath in chosen:
        try:
            lines = read_tail(safe, relpath, TAIL_BYTES)
        except (UnsafeFile, OSError):
            return None
        return parse_slurm_output(lines, relpath, restart)
    return None


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


def job_id_of(run: LoadedRun) -> str | None:
    doc = run.doc(names.SUBMISSION)
    job = doc.get("job_id") if isinstance(doc, dict) else None
    return job if isinstance(job, str) else None


def backend_of(run: LoadedRun) -> str | None:
    doc = run.doc(names.SUBMISSION)
    backend = doc.get("backend") if isinstance(doc, dict) else None
    return backend if isinstance(backend, str) else None
