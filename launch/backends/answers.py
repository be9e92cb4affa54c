"""What a scheduler's answers come to, in one shape for every backend: the ending it names for a job
(the audit makes it the run's first cause) and the view of a submitted job (`gym-launch status`).
Each backend's read-only modules (``launch/backends/*/query.py``, ``slurm/ending.py``) build them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas import FailureKind

__all__ = ["LABELS", "Answer", "SchedulerEnding", "SchedulerView", "asked_ending"]

LABELS = {
    FailureKind.TIME_LIMIT: "its time limit was reached",
    FailureKind.CANCELLED: "it was cancelled",
    FailureKind.NODE_FAILURE: "a node failed",
    FailureKind.PREEMPTED: "it was preempted",
}


@dataclass(frozen=True)
class SchedulerEnding:
    """What the scheduler said it did to the job, and where it said it."""

    kind: FailureKind
    job_id: str
    host: str  # where the scheduler wrote it (Slurm: the batch host)
    at: str  # the scheduler's own timestamp, as written
    words: str  # the scheduler's line, verbatim (asked afterwards: the command and its answer)
    file: str | None  # run-directory file; None when the scheduler was asked
    line: int  # 1-based, within the part read (the file's tail); 0 when asked
    node: str | None = None  # node_failure: the node that failed, where the scheduler names it

    @property
    def label(self) -> str:
        return LABELS[self.kind]


def asked_ending(kind: FailureKind, job: str, node: str | None, words: str, command: str) -> SchedulerEnding:
    """An ending the scheduler gave when asked (``command``: what was asked, in its words)."""
    return SchedulerEnding(kind, job, node or "", "", f"{command}: {words}", None, 0, node=node)


@dataclass(frozen=True)
class Answer:
    """What asking gave: an ending, or a note saying why there is none (None: nothing to ask)."""

    ending: SchedulerEnding | None
    note: str | None = None


@dataclass(frozen=True)
class SchedulerView:
    """The scheduler's side of a submitted run, asked at each look. `error` when it could not be asked."""

    backend: str
    job_id: str
    state: str | None = None  # as the scheduler spells it: PENDING, RUNNING, COMPLETED, TIMEOUT, ...
    reason: str | None = None  # why it pends or ended, in the scheduler's words
    nodes: str | None = None  # the nodes it got
    restarts: int | None = None  # requeues (Slurm), retries (Beaker), recoveries (SkyPilot)
    error: str | None = None
    asks: str = ""  # what is (or, without a client, would be) asked
    ended: bool = False  # the job has ended, as its scheduler's states say
    restarted: str = "restarted"  # how the scheduler words a new start of the job (Slurm: requeued)

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "job_id": self.job_id,
            "state": self.state,
            "reason": self.reason,
            "nodes": self.nodes,
            "restarts": self.restarts,
            "error": self.error,
            "asks": self.asks,
        }

    def describe(self) -> str:
        head = f"{self.backend} job {self.job_id}"
        if self.error:
            return f"{head}: state unknown ({self.error}; would ask {self.asks})"
        text = f"{head} {self.state or '?'}"
        if self.reason and self.reason != "None":
            text += f" ({self.reason})"
        if self.nodes and self.nodes != "(null)":
            text += f" on {self.nodes}"
        if self.restarts:
            text += f"; {self.restarted} {self.restarts} time(s)"
        return text
