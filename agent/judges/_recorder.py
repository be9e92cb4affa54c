"""What the judge client library does with every grade's outcome: one line in grades-RANK.jsonl
(agent/judges/_grade_log.py) and one count in the degraded-judge alarm (agent/judges/_alarm.py).

A driver the agent started gets a recorder without asking: ``bindings_from_registry`` and
``clients_from_registry`` build one from the driver's environment (``GYM_RUN_DIR``, ``GYM_RANK``)
and the registry's ``[judging]`` settings. Outside a run nothing is recorded unless a recorder
is passed explicitly.

A line the run directory refuses (full, unwritable, a planted symlink) does not fail the grade:
the driver's training is not at fault, and the reward is valid. It is said once on the driver's
stderr, and the lost line keeps its ``seq``, so a reader sees the gap (and how many lines are
missing). The alarm counts every outcome whether or not its line was written.

Nothing of the request's transport is written (the client sends no credential; a userinfo part of
an endpoint, which the spec refuses anyway, is dropped from what is recorded).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO
from urllib.parse import urlsplit, urlunsplit

import orjson

from agent.judges._alarm import (
    DEFAULT_MAX_SHARE,
    DEFAULT_WINDOW,
    EXCERPT_CHARS,
    AlarmRecord,
    BadReply,
    DegradedAlarm,
    Trip,
)
from agent.judges._grade_log import DEFAULT_KEEP, DEFAULT_MAX_BYTES, GradeLog, bounded
from agent.judges.rubrics import Rubric
from agent.proc import driver_local
from schemas import DriverEnv, credentials
from schemas.timefmt import iso_ms
from schemas.vocab import GradeOutcome

__all__ = ["ERROR_CHARS", "GradeRecorder", "GradingSettings", "binding_key"]

ERROR_CHARS = 1000  # of an exception's message in a line


@dataclass(frozen=True)
class GradingSettings:
    """The registry's ``judging`` table (the spec's ``[judging]`` keys), defaults for an older one."""

    grades_max_bytes: int = DEFAULT_MAX_BYTES
    grades_keep: int = DEFAULT_KEEP
    degraded_window: int = DEFAULT_WINDOW
    degraded_max_share: float = DEFAULT_MAX_SHARE

    @classmethod
    def from_registry(cls, registry: Mapping[str, Any]) -> GradingSettings:
        table = registry.get("judging") or {}
        return cls(
            grades_max_bytes=int(table.get("grades_max_bytes", DEFAULT_MAX_BYTES)),
            grades_keep=int(table.get("grades_keep", DEFAULT_KEEP)),
            degraded_window=int(table.get("degraded_window", DEFAULT_WINDOW)),
            degraded_max_share=float(table.get("degraded_max_share", DEFAULT_MAX_SHARE)),
        )


def binding_key(binding: str | None, judge: str | None, rubric: str) -> str:
    """What the alarm counts under: the binding, or for a direct client call outside any binding
    the judge and rubric it used."""
    return binding if binding is not None else f"{judge or 'unnamed judge'}/{rubric}"


def _redact_endpoint(diagnostics: dict[str, Any]) -> None:
    model = diagnostics.get("model")
    if not isinstance(model, dict):
        return
    endpoint = model.get("endpoint")
    if isinstance(endpoint, str) and "@" in endpoint:
        parts = urlsplit(endpoint)
        host = parts.netloc.rsplit("@", 1)[-1]
        model["endpoint"] = urlunsplit((parts.scheme, host, parts.path, "", ""))


def _bad_reply(seq: int, at: str, outcome: GradeOutcome, error: str | None, diagnostics: Mapping[str, Any]) -> BadReply:
    """What the degraded alarm keeps of an invalid or cut-off reply: an excerpt, not the whole."""
    raw = diagnostics.get("raw_reply")
    finish = diagnostics.get("finish_reason")
    return BadReply(
        seq,
        at,
        outcome,
        raw[:EXCERPT_CHARS] if isinstance(raw, str) else None,
        finish if isinstance(finish, str) else None,
        error or "",
    )


# Recorders of this process: a forked child (a driver's worker) is another writing process, with
# its own writer token and seq, and fresh locks (one held by another thread at fork stays held).
_LIVE: weakref.WeakSet[GradeRecorder] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for recorder in list(_LIVE):
        recorder._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


class GradeRecorder:
    """Records grades of one driver process. Thread-safe: one lock orders seq, line and alarm."""

    def __init__(
        self,
        log: GradeLog | None,
        alarm: DegradedAlarm | None = None,
        *,
        rank: int | None = None,
        attempt: int | None = None,
        fingerprint: str | None = None,
        bindings: Mapping[tuple[str, str], str] | None = None,
        alarm_record: AlarmRecord | None = None,
        stderr: TextIO | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.log = log
        self.alarm = alarm
        self.rank = rank
        self.attempt = attempt
        self.fingerprint = fingerprint
        # (judge, rubric name) -> verifier, for direct client calls: the binding they grade for.
        self._bindings = dict(bindings or {})
        self.alarm_record = alarm_record
        self._stderr = stderr
        self._clock = clock
        self._lock = threading.Lock()
        self._seq = 0
        self.writer = os.urandom(6).hex()
        self.lost = 0  # lines the run directory refused
        self._warned = False
        _LIVE.add(self)

    def _forked(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self.writer = os.urandom(6).hex()
        self.lost = 0
        self._warned = False
        if self.log is not None:
            self.log.after_fork()
        if self.alarm is not None:
            self.alarm.after_fork()

    @classmethod
    def from_env(
        cls, registry: Mapping[str, Any], env: Mapping[str, str] | None = None, *, stderr: TextIO | None = None
    ) -> GradeRecorder | None:
        """The recorder of a driver the agent started (its environment names the run directory and
        rank); None outside a run."""
        env = os.environ if env is None else env
        run_dir, rank = env.get(DriverEnv.RUN_DIR), env.get(DriverEnv.RANK)
        if not run_dir or not rank or not rank.isdigit():
            return None
        settings = GradingSettings.from_registry(registry)
        attempt = env.get(DriverEnv.ATTEMPT)
        bindings = {
            (str(b["judge"]), str(b["rubric"])): verifier for verifier, b in (registry.get("bindings") or {}).items()
        }
        recorder = cls(
            GradeLog(run_dir, int(rank), max_bytes=settings.grades_max_bytes, keep=settings.grades_keep),
            DegradedAlarm(settings.degraded_window, settings.degraded_max_share),
            rank=int(rank),
            attempt=int(attempt) if attempt and attempt.isdigit() else None,
            fingerprint=env.get(DriverEnv.FINGERPRINT) or None,
            bindings=bindings,
            stderr=stderr,
        )
        recorder.alarm_record = AlarmRecord.from_env(env, recorder.warn)
        return recorder

    # -- what the client calls --

    def binding_for(self, binding: str | None, judge: str | None, rubric: Rubric) -> str | None:
        if binding is not None or judge is None:
            return binding
        return self._bindings.get((judge, rubric.name))

    def tripped(self, binding: str | None, judge: str | None, rubric: Rubric) -> Trip | None:
        """The binding's alarm, if it tripped earlier: the client then refuses to grade through it."""
        if self.alarm is None:
            return None
        return self.alarm.tripped(binding_key(binding, judge, rubric.name))

    def record(
        self,
        *,
        binding: str | None,
        judge: str | None,
        rubric: Rubric,
        outcome: GradeOutcome,
        score: float | None,
        error: str | None,
        diagnostics: Mapping[str, Any],
    ) -> Trip | None:
        """Append the grade's line and count it; the Trip when this grade trips its binding's alarm."""
        diag, cut = bounded(dict(diagnostics))
        _redact_endpoint(diag)
        # The one redaction, outside the lock (the request and the reply may quote anything); the
        # line's other strings are the registry's names and ours.
        diag = credentials.redact(diag)
        error = credentials.redact_text(error) if error is not None else None
        with self._lock:
            self._seq += 1
            seq = self._seq
            at = iso_ms(self._clock())
            line: dict[str, Any] = {
                "schema": "grade",
                "schema_version": 1,
                "seq": seq,
                "writer": self.writer,
                "pid": os.getpid(),
                "at": at,
                "rank": self.rank,
                "attempt": self.attempt,
                "fingerprint": self.fingerprint,
                "binding": binding,
                "judge": judge,
                "rubric": {"name": rubric.name, "digest": rubric.digest},
                "outcome": str(outcome),
                "score": score,
                "replied": outcome.replied,
                "error": error[:ERROR_CHARS] if error is not None else None,
                "diagnostics": diag,
            }
            if cut:
                line["shortened"] = True
            if self.log is not None:
                self._write(line)
                # Progress (the agent's watch sees the grade); an unanswered one names its judge.
                driver_local.board().grade_recorded(str(outcome), judge)
            trip = None
            if self.alarm is not None:
                bad = _bad_reply(seq, at, outcome, error, diagnostics) if outcome.bad_reply else None
                trip = self.alarm.add(binding_key(binding, judge, rubric.name), judge, rubric.name, outcome, bad)
        if trip is not None:
            self.warn(trip.message())
            if self.alarm_record is not None:
                self.alarm_record.write(trip)
        return trip

    # -- internals --

    def _write(self, line: dict[str, Any]) -> None:
        assert self.log is not None
        try:
            self.log.append(orjson.dumps(line, option=orjson.OPT_SERIALIZE_NUMPY, default=str) + b"\n")
        except (OSError, TypeError, ValueError) as exc:
            self.lost += 1
            if not self._warned:
                self._warned = True
                self.warn(
                    f"cannot write {self.log.relpath} ({exc}); grades go on, unrecorded from seq {line['seq']} "
                    "(a gap in seq shows how many lines are missing); this is said once"
                )

    def warn(self, message: str) -> None:
        out = self._stderr if self._stderr is not None else sys.stderr
        try:
            print(f"gym judge client: {message}", file=out, flush=True)
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
