"""Errors the launcher reports to people: every one says what to change."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a run spec.

    ``key`` is the full dotted key path as it would be written for ``--set``
    (e.g. ``judges.general.timeout``); ``message`` says what to change.
    """

    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


class SpecError(Exception):
    """A spec that cannot be used. Carries every problem found, not just the first."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        if not self.problems:
            raise ValueError("SpecError needs at least one problem")
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


class UsageError(Exception):
    """A file-level or command-line problem (missing file, bad TOML, bad --set): one line."""
