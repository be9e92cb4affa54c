"""The degraded-judge alarm: a binding whose recent judge replies go bad fails the run.

Beyond the seed's per-grade rule (an invalid grade raises): a driver that catches those errors
and goes on would train on what is left, so the client library also watches the share of bad
replies per binding, and the agent fails the run when it is too high (FailureKind.JUDGE_DEGRADED).

The rule, exactly. Per binding, the last ``window`` judge replies are counted; a reply is a grade
whose outcome is graded, invalid or truncated (overflow, unavailable and refused are not replies:
they raise on their own and say nothing of the judge's answers). A reply is bad when it is invalid
or truncated. With ``allowed = floor(max_share * window)``, the alarm trips on the reply that makes
``bad > allowed``, i.e. ``bad > max_share * window``: with the defaults (100, 0.05) the 6th bad
reply among the last 100 trips, 5 do not. A window not yet full (the run's first replies) counts
against the same allowance: 6 bad replies trip whether they are 6 of 6 or 6 of 100, since a judge
that is bad at the start of a run is as bad as one that turns bad later. ``max_share = 1`` never
trips; ``max_share = 0`` trips on the first bad reply. A tripped binding stays tripped.
"""

from __future__ import annotations

import math
import os
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemas import DriverEnv, RunDir, Writer, WriterKind, names
from schemas.safe_io import RunDirError
from schemas.vocab import GradeOutcome

__all__ = [
    "DEFAULT_MAX_SHARE",
    "DEFAULT_WINDOW",
    "EXCERPT_CHARS",
    "AlarmRecord",
    "BadReply",
    "DegradedAlarm",
    "Trip",
    "allowance",
]

DEFAULT_WINDOW = 100  # [judging] degraded_window
DEFAULT_MAX_SHARE = 0.05  # [judging] degraded_max_share
EXCERPT_CHARS = 300  # of a bad reply, in the alarm record and the failure's cause
SHOWN = 2  # bad replies an alarm shows


def allowance(window: int, max_share: float) -> int:
    """How many bad replies a window may hold without tripping: floor(max_share * window).
    The epsilon keeps 0.07 * 100 (7.000000000000001 in binary) at 7."""
    return math.floor(max_share * window + 1e-9)


@dataclass(frozen=True)
class BadReply:
    """One invalid or truncated reply, as an alarm shows it."""

    seq: int
    at: str
    outcome: GradeOutcome
    excerpt: str | None
    finish_reason: str | None
    error: str

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at,
            "outcome": str(self.outcome),
            "excerpt": self.excerpt,
            "finish_reason": self.finish_reason,
            "error": self.error[:600],
        }

    def describe(self) -> str:
        return f"seq {self.seq} {self.outcome}: {self.excerpt!r}"


@dataclass(frozen=True)
class Trip:
    """A binding's alarm tripped: what it counted and the last bad replies."""

    binding: str
    judge: str | None
    rubric: str
    window: int
    max_share: float
    allowed: int
    replies: int
    bad: int
    bad_replies: tuple[BadReply, ...]

    def message(self) -> str:
        shown = "; ".join(b.describe() for b in self.bad_replies)
        return (
            f"judge degraded: binding {self.binding!r} (judge {self.judge}, rubric {self.rubric}): {self.bad} of its "
            f"last {self.replies} replies were invalid or truncated, more than {self.max_share:g} x {self.window} "
            f"([judging] degraded_max_share x degraded_window) allows; {shown}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "binding": self.binding,
            "judge": self.judge,
            "rubric": self.rubric,
            "window": self.window,
            "max_share": self.max_share,
            "allowed": self.allowed,
            "replies": self.replies,
            "bad": self.bad,
            "bad_replies": [b.to_json() for b in self.bad_replies],
        }


@dataclass
class _Window:
    replies: deque[bool]
    bad: int = 0
    recent_bad: deque[tuple[int, BadReply]] = field(default_factory=lambda: deque(maxlen=SHOWN))
    count: int = 0  # replies ever seen: the index of the last one
    tripped: Trip | None = None


class DegradedAlarm:
    """Per-binding windows of the last ``window`` replies. Thread-safe."""

    def __init__(self, window: int = DEFAULT_WINDOW, max_share: float = DEFAULT_MAX_SHARE) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        if not 0 <= max_share <= 1:
            raise ValueError("max_share must be within [0, 1]")
        self.window = window
        self.max_share = max_share
        self.allowed = allowance(window, max_share)
        self._lock = threading.Lock()
        self._windows: dict[str, _Window] = {}

    def after_fork(self) -> None:
        """In a forked child: a fresh lock; the windows counted so far stay (the same judge)."""
        self._lock = threading.Lock()

    def tripped(self, binding: str) -> Trip | None:
        with self._lock:
            w = self._windows.get(binding)
            return w.tripped if w is not None else None

    def add(
        self, binding: str, judge: str | None, rubric: str, outcome: GradeOutcome, bad: BadReply | None = None
    ) -> Trip | None:
        """Count one grade's outcome; the Trip when this reply trips the binding (once)."""
        if not outcome.replied:
            return None
        with self._lock:
            w = self._windows.setdefault(binding, _Window(deque(maxlen=self.window)))
            if w.tripped is not None:
                return None
            is_bad = outcome.bad_reply
            if len(w.replies) == self.window and w.replies[0]:
                w.bad -= 1  # the oldest reply leaves the window
            w.replies.append(is_bad)
            w.count += 1
            if is_bad:
                w.bad += 1
                if bad is not None:
                    w.recent_bad.append((w.count, bad))
            if w.bad <= self.allowed:
                return None
            first = w.count - len(w.replies) + 1  # the oldest reply still in the window
            shown = tuple(b for index, b in w.recent_bad if index >= first)
            w.tripped = Trip(
                binding, judge, rubric, self.window, self.max_share, self.allowed, len(w.replies), w.bad, shown
            )
            return w.tripped


class AlarmRecord:
    """Writes ``judge_degraded-RANK.json`` into the run directory on the first trip (the agent
    watches for it and fails the run). Exclusive create: the first trip of a rank is the record."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        rank: int,
        *,
        fingerprint: str,
        incarnation: str,
        grades_file: str | None,
        warn: Callable[[str], None],
    ) -> None:
        self.run_dir = Path(run_dir)
        self.relpath = names.judge_degraded(rank)
        self.writer = Writer(fingerprint, rank, incarnation, kind=WriterKind.DRIVER)
        self.grades_file = grades_file
        self._warn = warn
        self._lock = threading.Lock()
        self._written = False

    @classmethod
    def from_env(cls, env: Mapping[str, str], warn: Callable[[str], None]) -> AlarmRecord | None:
        """The record of a driver the agent started; None outside a run or without its identity."""
        need = (DriverEnv.RUN_DIR, DriverEnv.RANK, DriverEnv.FINGERPRINT, DriverEnv.INCARNATION)
        if not all(env.get(k) for k in need):
            return None
        rank = int(env[DriverEnv.RANK])
        return cls(
            env[DriverEnv.RUN_DIR],
            rank,
            fingerprint=env[DriverEnv.FINGERPRINT],
            incarnation=env[DriverEnv.INCARNATION],
            grades_file=names.grades(rank),
            warn=warn,
        )

    def write(self, trip: Trip) -> None:
        with self._lock:
            if self._written:
                return
            self._written = True
        fields = {**trip.to_json(), "pid": os.getpid()}
        if self.grades_file is not None:
            fields["grades_file"] = self.grades_file
        try:
            with RunDir.open(self.run_dir) as run:
                run.create_artifact(self.relpath, self.writer, fields)
        except FileExistsError:
            pass  # another process of this rank tripped first: its record stands
        except (OSError, RunDirError, ValueError) as exc:
            # The exception still reaches the driver; without the record the agent sees only its exit.
            self._warn(f"cannot write {self.relpath}: {exc}")
