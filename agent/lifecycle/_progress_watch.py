"""The driver's progress, watched on the driver's node: a run that stops making progress is a hang.

The driver makes progress when one of these advances, in this order of authority:
  1. agent.driver_api.progress() calls (the node-local progress board: no I/O at all);
  2. the declared training evidence, [driver.evidence] (new step lines: _evidence_tail.py);
  3. grades recorded (the judge client library counts them on the board);
  4. only when none of 1-3 is there: new bytes of the driver's output (the console tee counts them).
A source counts once it exists: progress() once called, the evidence from the start when declared,
grades once one was recorded. While 1 or 2 (or 3) exists output never counts: a hung trainer's
logging thread must not hide the hang. No progress for [driver] progress_timeout after the first,
or first_progress_timeout from the driver's start until the first, is a hang; a grade in flight
postpones it to that grade's own deadline (a judge that never answers ends as the judge's).

Runs in a thread of its own every poll interval; idle time is on this host's monotonic clock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.ground import clock
from agent.ground.failure import Failure, FailureSignal
from agent.lifecycle._evidence_tail import EvidenceTail
from agent.proc.driver_local import BoardReader, BoardReading
from launch.spec.sections import DriverConfig
from schemas import FailureKind, Phase, names, timefmt
from schemas.vocab import ProgressSource

__all__ = ["ProgressThread", "ProgressWatch", "Sources", "WATCHED", "board_reader", "evidence_source", "log"]

log = logging.getLogger(__name__)

WATCHED = {
    ProgressSource.PROGRESS: "progress() calls",
    ProgressSource.EVIDENCE: "[driver.evidence]",
    ProgressSource.GRADES: "grades recorded",
    ProgressSource.OUTPUT: "driver output",
}


@dataclass
class Sources:
    """Where the watch reads: each returns a token that changes with progress (and a step)."""

    board: Callable[[], BoardReading | None] = lambda: None
    evidence: Callable[[], tuple[int, int | None]] | None = None  # None: nothing declared
    output: Callable[[], int] = lambda: 0
    log_size: Callable[[], int | None] = lambda: None  # the driver log's bytes so far (None: unknown)


@dataclass
class ProgressWatch:
    config: DriverConfig
    sources: Sources
    rank: int
    now: Callable[[], float] = clock.mono
    wall: Callable[[], float] = clock.wall
    started: float = 0.0  # the driver's start, monotonic
    last: float | None = None  # the last progress seen, monotonic
    last_wall: float | None = None
    step: int | None = None
    count: int = 0
    grading_until: float = 0.0
    _tokens: dict[ProgressSource, Any] = field(default_factory=dict)

    def start(self) -> None:
        self.started = self.now()
        self._tokens = {ProgressSource.OUTPUT: self.sources.output()}
        if self.sources.evidence is not None:
            self._tokens[ProgressSource.EVIDENCE] = 0

    # -- looking -------------------------------------------------------------------------------

    def watched(self) -> list[ProgressSource]:
        """The sources that count now, by authority (output only when none of the others exists)."""
        return _counted(self._tokens)

    def look(self) -> bool:
        """Read every source once; True when progress was seen."""
        now = self.now()
        seen: dict[ProgressSource, Any] = {}
        board = self.sources.board()
        if board is not None:
            if board.calls:
                seen[ProgressSource.PROGRESS] = board.calls
            if board.grades:
                seen[ProgressSource.GRADES] = board.grades
            self.grading_until = board.grading_until
        evidence_step = None
        if self.sources.evidence is not None:
            seen[ProgressSource.EVIDENCE], evidence_step = self.sources.evidence()
        seen[ProgressSource.OUTPUT] = self.sources.output()
        moved = any(seen.get(s) != self._tokens.get(s) for s in _counted({**self._tokens, **seen}))
        self._tokens.update(seen)
        if moved:
            self.last, self.last_wall = now, self.wall()
            self.count += 1
            step = board.step if board is not None and board.step is not None else evidence_step
            if step is not None:
                self.step = step
        return moved

    # -- deciding ------------------------------------------------------------------------------

    def idle(self) -> float:
        return self.now() - (self.last if self.last is not None else self.started)

    def bound(self) -> tuple[str, float]:
        """(key, seconds) of the bound that applies now; seconds 0: no bound."""
        if self.config.progress_timeout == 0:
            return "progress_timeout", 0.0
        if self.last is None:
            return "first_progress_timeout", float(self.config.first_progress_timeout)
        return "progress_timeout", float(self.config.progress_timeout)

    def facts(self, key: str, bound: float, *, walltime: bool = False) -> dict[str, Any]:
        return {
            "source": str(self.watched()[0]),
            "timeout_key": key,
            "timeout": bound,
            "idle_seconds": round(self.idle(), 3),
            "last_progress_at": self.last_wall,
            "last_step": self.step,
            "progress_count": self.count,
            **({"walltime_warning": True} if walltime else {}),
            # Where the log stood when the hang was called: the audit's excerpt ends there, not at
            # what the driver printed while it was being stopped (a shutdown traceback).
            **({"log_bytes": size} if (size := self.sources.log_size()) is not None else {}),
        }

    def hang(self) -> Failure | None:
        """The hang, once the bound that applies ran out (never while a grade is in flight)."""
        key, bound = self.bound()
        if bound <= 0 or self.idle() <= bound or self.now() < self.grading_until:
            return None
        return self._failure(key, bound, self.facts(key, bound))

    def stuck_at_walltime(self) -> Failure | None:
        """The scheduler's walltime warning came: a driver without progress for progress_timeout
        (before its first progress too) is a hang, and its stacks are kept."""
        bound = float(self.config.progress_timeout)
        if bound <= 0 or self.idle() < bound:
            return None
        facts = self.facts("progress_timeout", bound, walltime=True)
        return self._failure("progress_timeout", bound, facts, walltime=True)

    def status(self) -> dict[str, Any]:
        """For the heartbeat: how long without progress, and whether that is past progress_timeout."""
        bound = float(self.config.progress_timeout)
        idle = self.idle()
        return {"idle_seconds": round(idle, 1), "stuck": bound > 0 and idle >= bound, "source": str(self.watched()[0])}

    def _failure(self, key: str, bound: float, facts: dict[str, Any], walltime: bool = False) -> Failure:
        watched = ", ".join(WATCHED[s] for s in self.watched())
        if self.last_wall is None:
            last = "no progress since the driver started"
        else:
            last = f"last progress at {timefmt.iso_ms(self.last_wall)}"
            if self.step is not None:
                last += f", step {self.step}"
        idle = facts["idle_seconds"]
        cause = f"the driver made no progress for {idle:.1f}s ({key} {bound:g}s; watched: {watched}); {last}"
        if walltime:
            cause += "; the scheduler's walltime warning came meanwhile"
        return Failure(
            kind=FailureKind.HANG,
            cause=cause,
            phase=str(Phase.DRIVER),
            log=names.driver_log(self.rank),
            hang=facts,
        )


class ProgressThread(threading.Thread):
    """Looks every poll interval; trips the run's failure signal with the hang."""

    def __init__(
        self,
        watch: ProgressWatch,
        signal: FailureSignal,
        poll: float,
        done: threading.Event,
        before_trip: Callable[[Failure], None] = lambda _failure: None,
    ) -> None:
        super().__init__(name="progress-watch", daemon=True)
        self.watch, self.signal, self.poll, self.done = watch, signal, poll, done
        self.before_trip = before_trip  # the stacks of every process, before anything stops

    def run(self) -> None:
        while not self.done.is_set() and not self.signal.is_set():
            try:
                self.watch.look()
                failure = self.watch.hang()
            except Exception as exc:  # noqa: BLE001 - the watch must never take the agent down
                log.warning("progress watch: %s: %s; looking again", type(exc).__name__, exc)
                failure = None
            if failure is not None:
                log.warning("%s", failure.cause)
                try:
                    self.before_trip(failure)
                except Exception as exc:  # noqa: BLE001 - the hang is called all the same
                    log.warning("stacks before the hang: %s: %s", type(exc).__name__, exc)
                self.signal.trip(failure)
                return
            self.done.wait(self.poll)


def _counted(tokens: dict[ProgressSource, Any]) -> list[ProgressSource]:
    order = (ProgressSource.PROGRESS, ProgressSource.EVIDENCE, ProgressSource.GRADES)
    return [s for s in order if s in tokens] or [ProgressSource.OUTPUT]


def board_reader(path: str | None) -> Callable[[], BoardReading | None]:
    if path is None:
        return lambda: None
    try:
        reader = BoardReader(path)
    except OSError:
        return lambda: None
    return reader.read


def evidence_source(tail: EvidenceTail | None) -> Callable[[], tuple[int, int | None]] | None:
    return tail.look if tail is not None else None
