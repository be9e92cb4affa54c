"""phases-RANK.json: one replica's lifecycle timeline (its builder) and what a reader gets from one
(PhasesRecord, its spans)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from schemas.lenient import Lenient, as_str, doc_field

__all__ = ["PhaseSpan", "PhasesRecord", "phase_entry", "phases_fields"]


@dataclass(frozen=True)
class PhaseSpan(Lenient):
    """One phase of one replica's timeline (wall times of that replica's host); unreadable
    without its name and start."""

    phase: str = doc_field(read=as_str)  # any string names it: the audit shows what was written
    started_at: float = doc_field()
    ended_at: float | None = None
    outcome: str = "unknown"
    detail: str = ""


@dataclass(frozen=True)
class PhasesRecord(Lenient):
    """A phases record as read; `rank` and `relpath` say where it was found."""

    rank: int = doc_field(given=True)
    relpath: str = doc_field(given=True)
    state: str | None = None
    spans: tuple[PhaseSpan, ...] = doc_field(key="phases", default=())


def phase_entry(*, phase: str, started_at: float, outcome: str, detail: str) -> dict[str, Any]:
    """One entry of `phases`, as a phase begins (its end fills `ended_at` and `outcome` in)."""
    return {"phase": phase, "started_at": started_at, "ended_at": None, "outcome": outcome, "detail": detail}


def phases_fields(
    *, state: str, node_index: int | None, address: str | None, entries: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The phases record's fields: the state and every phase entry so far."""
    return {"state": state, "node_index": node_index, "address": address, "phases": [dict(e) for e in entries]}
