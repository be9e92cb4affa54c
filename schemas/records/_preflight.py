"""preflight-RANK.json: one node's preflight, each check timed with its problems (its builder), and
what a reader gets from one (PreflightRecord)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from schemas.lenient import Lenient, doc_field

__all__ = ["HOSTNAME_MAX", "PreflightRecord", "preflight_fields"]

HOSTNAME_MAX = 255  # a hostname is at most this long (the schema's bound)


@dataclass(frozen=True)
class PreflightRecord(Lenient):
    """A preflight record as read; `rank` and `relpath` say where it was found. `checks` keeps one
    object per check as written (a damaged item reads as {})."""

    rank: int = doc_field(given=True)
    relpath: str = doc_field(given=True)
    node_index: int | None = None
    address: str | None = None
    hostname: str | None = None
    scheduler_node: str | None = None  # the scheduler's name for the node (Slurm), when it has one
    passed: bool | None = None
    checks: tuple[dict[str, Any], ...] = ()  # check, status (ok, warned, failed, off), problems, ...


def preflight_fields(
    *,
    node_index: int | None,
    address: str,
    hostname: str,
    scheduler_node: str | None,
    passed: bool,
    seconds: float,
    checks: Sequence[Mapping[str, Any]],
    gpus: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The preflight record's fields; `gpus` (each planned GPU's NVML identity) only when NVML told."""
    out: dict[str, Any] = {
        "node_index": node_index,
        "address": address,
        "hostname": hostname[:HOSTNAME_MAX],
        "scheduler_node": scheduler_node,
        "passed": passed,
        "seconds": round(seconds, 6),
        "checks": [dict(c) for c in checks],
    }
    if gpus:
        out["gpus"] = [dict(g) for g in gpus]
    return out
