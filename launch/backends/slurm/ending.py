"""Slurm's own words about how a job ended, read from the job's output (pure: lines in, an ending out).

When Slurm ends a job (walltime, a cancel, a failed node, a preemption) every rank gets SIGTERM at
about the same instant and no rank failed. Slurm says what it did in the job's output, which the
rendered job writes into the run directory (names.SLURM_OUTPUT). Its step daemon writes, on the
batch host:

    slurmstepd-n1: error: *** JOB 1 ON n1 CANCELLED AT 2026-12-01T10:59:58 DUE TO TIME LIMIT ***
    slurmstepd-n1: error: *** JOB 2 ON n1 CANCELLED AT 2026-12-01T10:58:40 ***            (scancel)
    slurmstepd-n1: error: *** JOB 3 ON n1 CANCELLED AT ... DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***
    srun: error: Node failure on n2

(measured on Slurm 22.05; "DUE TO PREEMPTION" is the preemption spelling). The JOB line, not a STEP
line, is the job's ending: ``srun --kill-on-bad-exit`` ends only a step when a task fails, and
then the failed task is the cause. A requeued job appends its next start to the same output, after
the job script's start line (names.SLURM_START_MARKER).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from launch.backends.answers import SchedulerEnding
from schemas import FailureKind, names

__all__ = ["TAIL_BYTES", "parse_slurm_output", "restart_section"]

# The ending is among the output's last lines: this much of its end is read.
TAIL_BYTES = 256 * 1024

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
