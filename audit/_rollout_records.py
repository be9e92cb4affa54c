"""The trainer's replay and rollout records (seed 000: "optimizer/publication/replay contracts and
retained rollout metadata"), validated and summarised: ``replay_routes`` lines of the MILES contract
records (written only with replay diagnostics on) and each sample's ``metadata.verifier_diagnostics``
in the trainer's rollout dumps (``[driver.evidence] rollouts``).

Pure tallies: ``audit._training_evidence`` reads the files (bounded, through SafeDir) and hands each
line here. A run that wrote neither has empty tallies and no finding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from launch.spec.evidence_lines import MILES_CONTRACT_VERSION

__all__ = ["MAX_INVALID", "BindingTally", "ReplayTally", "RolloutTally"]

MAX_INVALID = 20  # invalid lines named in a finding (the count is kept in full)


def _count(v: Any) -> int | None:
    """A non-negative count: an integer, or the length of a list (of attempts)."""
    if isinstance(v, list):
        return len(v)
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    return None


@dataclass
class _Invalid:
    count: int = 0
    where: list[str] = field(default_factory=list)

    def add(self, where: str) -> None:
        self.count += 1
        if len(self.where) < MAX_INVALID:
            self.where.append(where)


@dataclass
class ReplayTally:
    """``replay_routes`` lines per rank; a line is valid when it carries the contract's
    ``schema_version`` and the rank of the file it is in (every contract line does)."""

    per_rank: dict[int, int] = field(default_factory=dict)
    invalid: _Invalid = field(default_factory=_Invalid)

    def add(self, rank: int, doc: dict[str, Any], where: str) -> None:
        written = doc.get("rank")
        if doc.get("schema_version") != MILES_CONTRACT_VERSION or written != rank or isinstance(written, bool):
            self.invalid.add(f"{where} (schema_version {doc.get('schema_version')!r}, rank {written!r})")
            return
        self.per_rank[rank] = self.per_rank.get(rank, 0) + 1

    @property
    def lines(self) -> int:
        return sum(self.per_rank.values())

    @property
    def invalid_where(self) -> tuple[str, ...]:
        return tuple(self.invalid.where)

    def to_json(self) -> dict[str, Any] | None:
        if not self.per_rank and not self.invalid.count:
            return None  # replay diagnostics were off: nothing written, nothing to report
        return {
            "lines": self.lines,
            "per_rank": {str(r): n for r, n in sorted(self.per_rank.items())},
            "invalid": self.invalid.count,
        }


@dataclass
class BindingTally:
    """One binding's graded samples: their statuses and failed attempts."""

    samples: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    failed_attempts: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "statuses": dict(sorted(self.statuses.items())),
            "failed_attempts": self.failed_attempts,
        }


@dataclass
class RolloutTally:
    """Samples of the rollout dumps, and per binding what their ``metadata.verifier_diagnostics``
    say. An entry is valid when it is an object with a string ``status`` and, when present, a
    ``failed_attempts`` count (a non-negative integer or a list of attempts)."""

    files: list[str] = field(default_factory=list)
    samples: int = 0
    without_diagnostics: int = 0
    bindings: dict[str, BindingTally] = field(default_factory=dict)
    invalid: _Invalid = field(default_factory=_Invalid)

    def add(self, sample: dict[str, Any], where: str) -> None:
        self.samples += 1
        metadata = sample.get("metadata")
        diagnostics = metadata.get("verifier_diagnostics") if isinstance(metadata, dict) else None
        if diagnostics is None:
            self.without_diagnostics += 1
            return
        if not isinstance(diagnostics, dict):
            self.invalid.add(f"{where}: metadata.verifier_diagnostics is not an object")
            return
        for name, entry in diagnostics.items():
            self._entry(str(name), entry, where)

    def _entry(self, name: str, entry: Any, where: str) -> None:
        at = f"{where}: metadata.verifier_diagnostics.{name}"
        if not isinstance(entry, dict) or not isinstance(entry.get("status"), str) or not entry["status"]:
            self.invalid.add(f"{at} has no status")
            return
        failed = _count(entry.get("failed_attempts", 0))
        if failed is None:
            self.invalid.add(f"{at}.failed_attempts is not a count or a list")
            return
        written = entry.get("binding")
        binding = written if isinstance(written, str) and written else name
        tally = self.bindings.setdefault(binding, BindingTally())
        tally.samples += 1
        tally.statuses[entry["status"]] = tally.statuses.get(entry["status"], 0) + 1
        tally.failed_attempts += failed

    @property
    def invalid_where(self) -> tuple[str, ...]:
        return tuple(self.invalid.where)

    def to_json(self) -> dict[str, Any] | None:
        if not self.files:
            return None  # not declared, or the trainer kept no dump
        return {
            "files": list(self.files),
            "samples": self.samples,
            "without_diagnostics": self.without_diagnostics,
            "bindings": {b: t.to_json() for b, t in sorted(self.bindings.items())},
            "invalid": self.invalid.count,
        }
