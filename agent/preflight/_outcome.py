"""What a preflight check finds and how it ended: the data every check returns and the report
preflight-RANK.json is written from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas.vocab import CheckStatus, PreflightCheck

__all__ = ["CheckResult", "MAX_PROBLEMS", "MAX_TEXT", "Observed", "cap", "decide", "gib"]

MAX_PROBLEMS = 256
MAX_TEXT = 2000


def cap(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Observed:
    """What one check saw: a one-line summary, the problems (each naming what to change), the
    facts it measured; `skipped` when there was nothing to check (no NVML, no GPU planned)."""

    summary: str
    problems: tuple[str, ...] = ()
    facts: Mapping[str, Any] = field(default_factory=dict)
    skipped: bool = False


@dataclass(frozen=True)
class CheckResult:
    check: PreflightCheck
    mode: str  # "fail" | "warn" | "off"
    status: CheckStatus
    seconds: float
    summary: str
    problems: tuple[str, ...] = ()
    facts: Mapping[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status is CheckStatus.FAILED

    def to_json(self) -> dict[str, Any]:
        return {
            "check": str(self.check),
            "mode": self.mode,
            "status": str(self.status),
            "seconds": round(self.seconds, 6),
            "summary": cap(self.summary),
            "problems": [cap(p) for p in self.problems[:MAX_PROBLEMS]],
            "facts": dict(self.facts),
        }


def decide(check: PreflightCheck, mode: str, seconds: float, seen: Observed) -> CheckResult:
    """The status of a check that ran, from what it saw and its mode."""
    if seen.skipped:
        status = CheckStatus.SKIPPED
    elif not seen.problems:
        status = CheckStatus.OK
    else:
        status = CheckStatus.FAILED if mode == "fail" else CheckStatus.WARNED
    return CheckResult(check, mode, status, seconds, seen.summary, seen.problems, seen.facts)


def gib(n: float | None) -> str:
    """Bytes for people: "12.3 GiB", "512 MiB"."""
    if n is None:
        return "?"
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"
