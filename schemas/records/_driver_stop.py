"""driver-stop.json: the driver was asked to checkpoint ([driver] checkpoint_grace) and what it did
(its builder), and what a reader gets from one (DriverStopRecord)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas.lenient import Lenient

__all__ = ["REASON_MAX", "DriverStopRecord", "driver_stop_fields"]

REASON_MAX = 2000  # the schema's maxLength of `reason`


@dataclass(frozen=True)
class DriverStopRecord(Lenient):
    """driver-stop.json as read."""

    outcome: str | None = None  # asked, exited, grace_expired, already_exited
    grace_s: float | None = None
    after_s: float | None = None  # from the request to the driver's exit (or the grace's end)
    reason: str = "?"  # the failure that asked for the stop
    exit_code: int | None = None


def driver_stop_fields(
    *, reason: str, grace_s: float, outcome: str, exit_code: int | None, after_s: float | None
) -> dict[str, Any]:
    """The request (`outcome` asked) or what the driver did; `reason` is cut to the schema's bound."""
    return {
        "reason": reason[:REASON_MAX],
        "grace_s": grace_s,
        "outcome": outcome,
        "exit_code": exit_code,
        "after_s": round(after_s, 3) if after_s is not None else None,
    }
