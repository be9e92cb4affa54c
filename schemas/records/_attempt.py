"""An attempt's records: attempts/N/claim.json (one launch won attempt N), ready.json (its files
were archived: agents may start) and refused.json (the restart caps said no), their builders and
what a reader gets from one (AttemptRecord)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from schemas.lenient import Lenient, as_written, doc_field, nonempty_dict

__all__ = ["AttemptRecord", "attempt_fields", "claim_fields", "refused_fields"]


@dataclass(frozen=True)
class AttemptRecord(Lenient):
    """A claim, readiness or refusal as read (any string is a token or a mode)."""

    state: str | None = None
    token: str | None = None
    mode: str | None = None  # a claim: resume or restart
    reason: Any = doc_field(read=as_written, default=None)  # a refusal's words, quoted as written
    written_at: float | None = None  # the writer's wall clock (every artifact's envelope)
    # A claim: the checkpoints when it was written, and the previous attempt's first cause.
    checkpoints: dict[str, Any] | None = doc_field(read=nonempty_dict, default=None)
    previous_cause: str | None = None


def attempt_fields(*, state: str, token: str, previous: int | None, archived: Sequence[str] = ()) -> dict[str, Any]:
    """attempts/N/ready.json (and the common part of claim.json and refused.json)."""
    return {"state": state, "token": token, "previous": previous, "archived": list(archived)}


def claim_fields(
    *, token: str, previous: int | None, mode: str, checkpoints: Mapping[str, Any], previous_cause: str | None
) -> dict[str, Any]:
    """attempts/N/claim.json: who claimed it, how, and what the restart caps need."""
    return {
        **attempt_fields(state="claimed", token=token, previous=previous),
        "mode": mode,
        "checkpoints": dict(checkpoints),
        "previous_cause": previous_cause,
    }


def refused_fields(*, token: str, previous: int | None, reason: str) -> dict[str, Any]:
    """attempts/N/refused.json: written instead of a claim, with why the caps refused."""
    return {**attempt_fields(state="refused", token=token, previous=previous), "reason": reason}
