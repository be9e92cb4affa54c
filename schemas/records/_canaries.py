"""judge-canaries.json: known-good against known-bad through every binding, before training and in
rounds during it (its builders), and what a reader gets from it (CanariesRecord)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from schemas.lenient import Lenient, as_written, doc_field

__all__ = ["CanariesRecord", "CanaryBinding", "CanaryRound", "canaries_fields", "canary_binding", "canary_round"]


@dataclass(frozen=True)
class CanaryBinding(Lenient):
    """One binding's canary as read: nothing required, so a damaged item keeps its index."""

    verifier: str | None = None
    judge: str | None = None
    rubric: str | None = None
    model_listed: bool | None = None
    passed: bool | None = None
    reason: str | None = None
    samples: tuple[Mapping[str, Any], ...] = ()
    # The judge and rubric as written: a finding quotes them, whatever their type.
    judge_as_written: Any = doc_field(key="judge", read=as_written, default=None)
    rubric_as_written: Any = doc_field(key="rubric", read=as_written, default=None)


@dataclass(frozen=True)
class CanaryRound(Lenient):
    """A round during the run as read."""

    judge: str | None = None
    passed: bool | None = None
    bindings: tuple[CanaryBinding, ...] = ()


@dataclass(frozen=True)
class CanariesRecord(Lenient):
    """judge-canaries.json as read."""

    passed: bool | None = None
    bindings: tuple[CanaryBinding, ...] = ()
    rounds: tuple[CanaryRound, ...] = ()


def canary_binding(
    *,
    verifier: str,
    judge: str,
    rubric: str,
    model: str,
    model_listed: bool,
    listed_models: Sequence[str],
    passed: bool,
    reason: str,
    samples: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """One binding's canary: whether its judge listed its model, and every graded sample."""
    return {
        "verifier": verifier,
        "judge": judge,
        "rubric": rubric,
        "model": model,
        "model_listed": model_listed,
        "listed_models": list(listed_models),
        "passed": passed,
        "reason": reason,
        "samples": [dict(s) for s in samples],
    }


def canary_round(*, judge: str, at: str, passed: bool, bindings: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A round of one judge's canaries during the run; `at` as an ISO time."""
    return {"judge": judge, "at": at, "passed": passed, "bindings": [dict(b) for b in bindings]}


def canaries_fields(
    *,
    passed: bool,
    bindings: Sequence[Mapping[str, Any]],
    repetitions: int | None = None,
    rounds: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """judge-canaries.json: the canaries before training (`bindings` built by `canary_binding`;
    `repetitions` unknown when no canary ran before the first round); `rounds` (built by
    `canary_round`) once a round during the run was recorded."""
    optional = {"repetitions": repetitions, "rounds": [dict(r) for r in rounds] if rounds is not None else None}
    return {
        "passed": passed,
        "bindings": [dict(b) for b in bindings],
        **{k: v for k, v in optional.items() if v is not None},
    }
