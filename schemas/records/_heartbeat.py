"""heartbeats/heartbeat-RANK.json: a replica's liveness counter (its builder) and what a reader gets
from one (HeartbeatRecord)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas.lenient import Lenient

__all__ = ["HeartbeatRecord", "heartbeat_fields"]


@dataclass(frozen=True)
class HeartbeatRecord(Lenient):
    """A heartbeat as read: its counter and the phase the replica was in."""

    seq: int | None = None
    phase: str | None = None
    written_at: float | None = None  # the writer's wall clock (every artifact's envelope)


def heartbeat_fields(
    *, seq: int, phase: str, fs_ops: Mapping[str, int], extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The heartbeat's fields; `extra` is what the node adds (the driver's node: `progress`)."""
    return {"seq": seq, "phase": phase, "fs_ops": dict(fs_ops), **(extra or {})}
