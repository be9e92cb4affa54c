"""driver-result.json: the driver's own evidence of training (its builder, which the driver API
calls) and what a reader gets from it (DriverResultRecord)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas.lenient import ABSENT, Lenient, as_written, doc_field, items_as_written

__all__ = ["DriverResultRecord", "driver_result_fields"]


@dataclass(frozen=True)
class DriverResultRecord(Lenient):
    """driver-result.json as read. The findings quote the counts as written (`optimizer_steps is
    'x'`), so each count is kept both typed and as written."""

    optimizer_steps: int | None = None
    policy_refreshes: int | None = None
    judge_replies: int | None = None
    losses: tuple[Any, ...] = doc_field(read=items_as_written, default=())  # a finding names the bad by index
    final_loss: Any = doc_field(read=as_written, default=ABSENT)  # as written; ABSENT: not written
    writer: str | None = None
    optimizer_steps_as_written: Any = doc_field(key="optimizer_steps", read=as_written, default=None)
    policy_refreshes_as_written: Any = doc_field(key="policy_refreshes", read=as_written, default=None)
    judge_replies_as_written: Any = doc_field(key="judge_replies", read=as_written, default=None)


def driver_result_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """driver-result.json's fields as the driver gave them (the schema says which): refused when a
    loss is not finite, which JSON cannot carry and which no training shows."""
    losses = fields.get("losses", [])
    if any(not math.isfinite(x) for x in losses) or not math.isfinite(fields.get("final_loss", 0.0)):
        raise ValueError("losses must be finite")
    return dict(fields)
