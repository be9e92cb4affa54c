"""submission.json: how the run was submitted to a scheduler (its builder, which gym-launch submit
and regrade call) and what a reader gets from it (SubmissionRecord)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from schemas.lenient import Lenient, as_written, doc_field

__all__ = ["SubmissionRecord", "submission_fields"]


@dataclass(frozen=True)
class SubmissionRecord(Lenient):
    """submission.json as read (any string is a name: the empty one too)."""

    backend: str | None = None
    job_id: str | None = None
    # `gym-launch status` names the backend as written when it knows no such scheduler.
    backend_as_written: Any = doc_field(key="backend", read=as_written, default=None)


def submission_fields(
    *, backend: str, job_id: str, job_file: str, command: Sequence[str], submitted_at: float
) -> dict[str, Any]:
    """submission.json: the scheduler, its job, the job file (relative to the run directory) and
    the command that submitted it."""
    return {
        "backend": backend,
        "job_id": job_id,
        "job_file": job_file,
        "command": list(command),
        "submitted_at": submitted_at,
    }
