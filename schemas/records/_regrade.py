"""regrade.json: the finished run a judge-only job grades again, and its execution profile (its
builder, which gym-launch regrade calls) and what a reader gets from it (RegradeRecord)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas.lenient import Lenient, as_written, doc_field, items_as_written

__all__ = ["RegradeRecord", "regrade_fields"]


@dataclass(frozen=True)
class RegradeRecord(Lenient):
    """regrade.json as read: the findings quote the fingerprint and the services as written."""

    source_run_dir: str | None = None
    kind: str | None = doc_field(path=("profile",), key="kind", default=None)
    services: tuple[Any, ...] = doc_field(path=("profile",), key="services", read=items_as_written, default=())
    source_fingerprint: Any = doc_field(read=as_written, default=None)


def regrade_fields(
    *,
    source_run_dir: str,
    source_uuid: str,
    source_name: str,
    source_fingerprint: str,
    command: str,
    profile: Mapping[str, Any],
) -> dict[str, Any]:
    """regrade.json: which run the job grades again (its directory, uuid, name and spec
    fingerprint), the grading command, and the profile it runs with."""
    return {
        "source_run_dir": source_run_dir,
        "source_uuid": source_uuid,
        "source_name": source_name,
        "source_fingerprint": source_fingerprint,
        "command": command,
        "profile": dict(profile),
    }
