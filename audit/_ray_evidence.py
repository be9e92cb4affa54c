"""Which of Ray's own session logs (kept in ray-session-RANK/) speak to a failure.

A Ray child that exited (`child_exit` citing ray-RANK.log), a layout that never formed, or a
failure in a Ray phase: the raylet's and GCS's logs of that rank say why (an OOM kill, a lost
GCS) where `ray start`'s own output does not. Decided on the record's fields, never its text.
"""

from __future__ import annotations

from collections.abc import Mapping

from audit._model import Cause
from schemas import FailureKind, Phase, names

__all__ = ["FIRST", "MAX_LISTED", "RAY_KINDS", "RAY_PHASES", "ray_evidence"]

RAY_KINDS = {FailureKind.CHILD_EXIT, FailureKind.LAYOUT}
RAY_PHASES = {Phase.RAY_START, Phase.READINESS}
FIRST = ("raylet.out", "raylet.err", "gcs_server.out", "gcs_server.err")
MAX_LISTED = 6


def ray_evidence(cause: Cause, log: str | None, logs: Mapping[str, int]) -> tuple[str, ...]:
    """The rank's kept Ray session logs, most telling first, when the failure involves Ray."""
    involved = (
        (log is not None and log == names.ray_log(cause.rank)) or cause.kind in RAY_KINDS or cause.phase in RAY_PHASES
    )
    if not involved:
        return ()
    prefix = names.ray_session_dir(cause.rank) + "/"
    kept = [p for p in logs if p.startswith(prefix) and logs[p] > 0]
    order = {names.ray_session_log(cause.rank, leaf): i for i, leaf in enumerate(FIRST)}
    kept.sort(key=lambda p: (order.get(p, len(FIRST) + (0 if p.endswith(".err") else 1)), p))
    return tuple(kept[:MAX_LISTED])
