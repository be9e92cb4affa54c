"""cleanup-RANK.json: every process group one replica started and how it was stopped (its builder,
for the agent's teardown and the reaper alike), and what a reader gets from one (CleanupRecord)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas.lenient import Lenient, doc_field
from schemas.vocab import RunOutcome

__all__ = ["CleanupRecord", "cleanup_fields"]


@dataclass(frozen=True)
class CleanupRecord(Lenient):
    """A cleanup record as read; `rank` and `relpath` say where it was found. `groups` and
    `gpu_residue` keep one object per item as written (a damaged item reads as {}), so an item's
    index is its index in the file."""

    rank: int = doc_field(given=True)
    relpath: str = doc_field(given=True)
    writer: str | None = None  # the agent, or its reaper when the agent was killed
    outcome: str | None = None  # how this replica's run ended, not whether the teardown worked
    groups: tuple[dict[str, Any], ...] = ()
    leftover_pids: tuple[int, ...] = ()
    doorbell: Mapping[str, Any] = field(default_factory=dict)  # the doorbell's counters
    corrupt_heartbeats: Mapping[str, Any] = field(default_factory=dict)  # watched rank -> reads
    gpu_residue: tuple[dict[str, Any], ...] = ()


def cleanup_fields(
    *,
    outcome: RunOutcome,
    groups: Sequence[Mapping[str, Any]],
    leftover_pids: Sequence[int],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The cleanup record's fields; `extra` holds the sections a node adds when it has them
    (`doorbell`, `corrupt_heartbeats`, `gpu_residue`)."""
    return {
        "outcome": str(outcome),
        "groups": [dict(g) for g in groups],
        "leftover_pids": list(leftover_pids),
        **(extra or {}),
    }
