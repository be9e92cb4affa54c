"""The two ends of a successful run: complete.json (the driver's node: the driver finished) and
acks/ack-RANK.json (each replica read it), their builders and what a reader gets from them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas.lenient import Lenient
from schemas.vocab import RunOutcome

__all__ = ["AckRecord", "CompleteRecord", "ack_fields", "complete_fields"]


@dataclass(frozen=True)
class CompleteRecord(Lenient):
    """complete.json as read."""

    driver_rank: int | None = None  # where the driver ran
    driver_exit_code: int | None = None
    driver_seconds: float | None = None


def complete_fields(*, driver_rank: int, driver_seconds: float) -> dict[str, Any]:
    """complete.json: written only when the driver exited 0 (the schema's const), with how long it ran."""
    return {"driver_rank": driver_rank, "driver_exit_code": 0, "driver_seconds": round(driver_seconds, 3)}


@dataclass(frozen=True)
class AckRecord(Lenient):
    """An acknowledgement as read."""

    outcome: str | None = None


def ack_fields() -> dict[str, Any]:
    """A replica's acknowledgement: it read complete.json (the only outcome an ack has)."""
    return {"outcome": str(RunOutcome.SUCCESS)}
