"""The progress watch's rules on a fake clock with hand-driven sources (agent/lifecycle/_progress_watch.py),
and the real progress board between a writer and the agent's reader. The same watch on real agents:
tests/test_hang_e2e.py."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agent.lifecycle._progress_watch import ProgressWatch, Sources
from agent.proc import driver_local
from agent.proc.driver_local import BoardReading
from launch.spec.sections import DriverConfig
from schemas import DriverEnv, FailureKind
from tests.test_liveness import FakeClock

TIMEOUT = 10.0
FIRST = 30.0


@dataclass
class Fake:
    """Sources the test moves by hand."""

    calls: int = 0
    step: int | None = None
    grades: int = 0
    grading_until: float = 0.0
    evidence: int = 0
    evidence_step: int | None = None
    output: int = 0
    declared: bool = False
    seen: list[str] = field(default_factory=list)

    def sources(self) -> Sources:
        return Sources(
            board=lambda: BoardReading(self.calls, self.step, self.grades, self.grading_until),
            evidence=(lambda: (self.evidence, self.evidence_step)) if self.declared else None,
            output=lambda: self.output,
        )


def watch(fake: Fake, clock: FakeClock, progress: float = TIMEOUT, first: float = FIRST) -> ProgressWatch:
    config = DriverConfig(command="true", progress_timeout=progress, first_progress_timeout=first)
    w = ProgressWatch(config, fake.sources(), rank=0, now=clock, wall=lambda: 1.7e9 + clock.t)
    w.start()
    return w


def run_for(w: ProgressWatch, clock: FakeClock, seconds: float, each: object = None, step: float = 0.5) -> float | None:
    """Look every `step` seconds for `seconds` (calling `each()` first); when the hang was called."""
    end = clock.t + seconds
    while clock.t < end:
        if callable(each):
            each()
        w.look()
        if w.hang() is not None:
            return clock.t
        clock.t += step
    return None


def test_silence_after_progress_is_a_hang_after_progress_timeout() -> None:
    clock, fake = FakeClock(), Fake()
    w = watch(fake, clock)

    def work() -> None:
        fake.calls += 1
        fake.step = fake.calls

    assert run_for(w, clock, 20.0, work) is None
    quiet = clock.t
    called = run_for(w, clock, 30.0)
    assert called is not None and TIMEOUT < called - quiet + 0.5 <= TIMEOUT + 1.0
    failure = w.hang()
    assert failure is not None and failure.kind == FailureKind.HANG and failure.phase == "driver"
    assert failure.hang is not None and failure.hang["source"] == "progress" and failure.hang["last_step"] == 40
    assert failure.hang["timeout_key"] == "progress_timeout" and failure.hang["idle_seconds"] > TIMEOUT
    assert "no progress for" in failure.cause and "step 40" in failure.cause and failure.log == "driver-0.log"


def test_before_the_first_progress_first_progress_timeout_applies() -> None:
    clock, fake = FakeClock(), Fake()
    w = watch(fake, clock)
    called = run_for(w, clock, 60.0)
    assert called is not None and FIRST < called - 1000.0 <= FIRST + 0.5
    failure = w.hang()
    assert failure is not None and failure.hang is not None
    assert failure.hang["timeout_key"] == "first_progress_timeout" and failure.hang["last_progress_at"] is None
    assert "no progress since the driver started" in failure.cause


def test_output_counts_only_while_nothing_better_exists() -> None:
    """A chatty driver: output alone keeps it alive; once it calls progress(), output no longer counts."""
    clock, fake = FakeClock(), Fake()
    w = watch(fake, clock)

    def chatter() -> None:
        fake.output += 100

    assert run_for(w, clock, 40.0, chatter) is None  # past FIRST too: output was progress
    fake.calls = 1  # one progress() call: from now on the board decides
    called = run_for(w, clock, 30.0, chatter)
    assert called is not None
    failure = w.hang()
    assert failure is not None and failure.hang is not None and failure.hang["source"] == "progress"


def test_declared_evidence_that_stalls_is_a_hang_while_the_driver_keeps_printing() -> None:
    clock, fake = FakeClock(), Fake(declared=True)
    w = watch(fake, clock)

    def train() -> None:
        fake.output += 50
        fake.evidence += 1
        fake.evidence_step = fake.evidence

    assert run_for(w, clock, 20.0, train) is None

    def chatter() -> None:
        fake.output += 50

    called = run_for(w, clock, 30.0, chatter)
    assert called is not None
    failure = w.hang()
    assert failure is not None and failure.hang is not None
    assert failure.hang["source"] == "evidence" and failure.hang["last_step"] == 40
    assert "[driver.evidence]" in failure.cause


def test_grades_are_progress_and_a_grade_in_flight_postpones_the_hang() -> None:
    clock, fake = FakeClock(), Fake()
    w = watch(fake, clock)

    def grade() -> None:
        fake.grades += 1

    assert run_for(w, clock, 20.0, grade) is None
    fake.grading_until = clock.t + 25.0  # one grade in flight for up to 25 s (the judge's own deadline)
    start = clock.t
    called = run_for(w, clock, 60.0)
    assert called is not None and called >= start + 25.0  # not before the grade's deadline


def test_progress_timeout_zero_turns_it_off() -> None:
    clock, fake = FakeClock(), Fake()
    w = watch(fake, clock, progress=0.0)
    assert run_for(w, clock, 3 * FIRST) is None
    assert w.stuck_at_walltime() is None


def test_a_walltime_warning_on_a_stuck_driver_is_a_hang_before_first_progress_timeout() -> None:
    clock, fake = FakeClock(), Fake()
    w = watch(fake, clock, progress=TIMEOUT, first=10 * FIRST)
    run_for(w, clock, TIMEOUT - 2)
    assert w.stuck_at_walltime() is None  # not stuck for progress_timeout yet
    run_for(w, clock, 4.0)
    failure = w.stuck_at_walltime()
    assert failure is not None and failure.hang is not None and failure.hang["walltime_warning"] is True
    assert "walltime warning" in failure.cause
    assert w.status()["stuck"] is True


def test_the_board_between_a_driver_process_and_the_agent(tmp_path: Path) -> None:
    """A real driver process calls progress(step) through agent.driver_api; the agent's reader
    sees every call on the shared page, with the step; grades and their deadline too."""
    board = str(tmp_path / "progress")
    driver_local.create_board(board)
    reader = driver_local.BoardReader(board)
    assert reader.read() == BoardReading(0, None, 0, 0.0)
    code = (
        "from agent import driver_api\n"
        "from agent.proc import driver_local\n"
        "for i in range(5): driver_api.progress(i)\n"
        "driver_api.progress()\n"
        "b = driver_local.board(); b.grade_recorded(); t = b.grading(123.0)\n"
        "print(t, flush=True); input()\n"
        "b.graded(t)\n"
    )
    env = {**os.environ, DriverEnv.PROGRESS_FILE: board}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"1"
        seen = reader.read()
        assert seen.calls == (proc.pid << 32) | 6 and seen.step == 4  # progress() without a step keeps the last
        assert seen.grades == (proc.pid << 32) | 1 and seen.grading_until == 123.0
        proc.communicate(b"\n", timeout=30)
        assert reader.read().grading_until == 0.0  # the grade ended: nothing in flight
    finally:
        proc.kill()
        reader.close()


def test_progress_outside_a_run_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DriverEnv.PROGRESS_FILE, raising=False)
    monkeypatch.setattr(driver_local, "_board", None)
    from agent import driver_api

    monkeypatch.setattr(driver_api, "_board", None)
    driver_api.progress(3)  # no board, no error
    assert driver_local.board() is driver_local.NO_BOARD


def test_the_board_keeps_the_judge_of_an_unanswered_last_grade(tmp_path: Path) -> None:
    """What the agent names when the driver exits after a judge left its grade unanswered."""
    board = str(tmp_path / "progress")
    driver_local.create_board(board)
    writer, reader = driver_local.BoardWriter(board), driver_local.BoardReader(board)
    writer.grade_recorded("graded", "general")
    assert reader.read().unanswered is None
    writer.grade_recorded("unavailable", "general")
    assert reader.read().unanswered == ("unavailable", "general")
    writer.grade_recorded("invalid", "general")  # the judge answered (badly): not unanswered
    assert reader.read().unanswered is None
    reader.close()
