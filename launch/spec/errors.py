"""Errors in a run spec or a command line, reported to people: every one says what to change.

Both derive from ``GymError`` (schemas/errors.py), the root of every user error of the commands,
which carries the exit code; it is re-exported here beside them for the spec model's callers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from schemas.errors import GymError

__all__ = ["GymError", "Problem", "SpecError", "UsageError"]


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


class SpecError(GymError):
    """A spec that cannot be used. Carries every problem found, not just the first."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        if not self.problems:
            raise ValueError("SpecError needs at least one problem")
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


class UsageError(GymError):
    """A file-level or command-line problem (missing file, bad TOML, bad --set): one line."""
