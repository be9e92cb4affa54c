"""registry.json: the run's judges (each behind its gateway), rubrics and bindings, as the driver's
node resolved them (its builders) and what a reader gets from it (RegistryRecord)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas.lenient import ABSENT, Absent, Lenient

__all__ = ["RegistryBinding", "RegistryJudge", "RegistryRecord", "registry_fields", "registry_judge"]


@dataclass(frozen=True)
class RegistryJudge(Lenient):
    """A judge's entry as read: `endpoint` is its gateway, `upstream` the judge itself (ABSENT: a
    registry written before gateways, where `endpoint` is the judge)."""

    mode: str | None = None
    endpoint: str | None = None
    upstream: str | None | Absent = ABSENT
    rank: int | None = None  # a managed judge's host rank


@dataclass(frozen=True)
class RegistryBinding(Lenient):
    """A verifier's binding as read (an empty string kept: it is what was written)."""

    judge: str | None = None
    rubric: str | None = None


@dataclass(frozen=True)
class RegistryRecord(Lenient):
    """registry.json as read; the rubrics by name, as written."""

    judges: Mapping[str, RegistryJudge] = field(default_factory=dict)
    rubrics: Mapping[str, Any] = field(default_factory=dict)
    bindings: Mapping[str, RegistryBinding] = field(default_factory=dict)


def registry_judge(
    *,
    mode: str,
    backend: str | None,
    model: str,
    timeout: int,
    max_context_length: int | None,
    context_check: str | None,
    max_concurrent_calls: int | None,
    endpoint: str,
    upstream: str | None,
    rank: int | None,
    devices: Sequence[int],
) -> dict[str, Any]:
    """A judge's entry: every client of the run talks to it through its gateway (`endpoint`);
    `upstream` is the judge itself (an external judge: no rank, no devices)."""
    return {
        "mode": mode,
        "backend": backend,
        "model": model,
        "timeout": timeout,
        "max_context_length": max_context_length,
        "context_check": context_check,
        "max_concurrent_calls": max_concurrent_calls,
        "upstream": upstream,
        "rank": rank,
        "devices": list(devices),
        "endpoint": endpoint,
    }


def registry_fields(
    *,
    judges: Mapping[str, Mapping[str, Any]],
    rubrics: Mapping[str, Mapping[str, Any]],
    bindings: Mapping[str, tuple[str, str]],
    judging: Mapping[str, Any],
) -> dict[str, Any]:
    """registry.json: `judges` built by `registry_judge`, `bindings` verifier -> (judge, rubric),
    `judging` the [judging] settings the driver's judge client library applies."""
    return {
        "judges": {name: dict(entry) for name, entry in judges.items()},
        "rubrics": {name: dict(r) for name, r in rubrics.items()},
        "bindings": {v: {"judge": judge, "rubric": rubric} for v, (judge, rubric) in bindings.items()},
        "judging": dict(judging),
    }
