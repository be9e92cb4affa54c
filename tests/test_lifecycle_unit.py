"""Lifecycle parts without processes: the step table, the enforced state machine, the one
polling helper, the reaper's line protocol and the one failure-record writer."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import pytest

from agent.coord.failure import AgentFailed, Failure, FailureSignal, write_failure_record
from agent.lifecycle.agent import RUN_STEPS, STARTUP_STEPS, IllegalTransition, PhaseLog
from agent.proc.waits import poll_until
from agent.reaper import ReaperChannel, ReaperState
from schemas import AgentState, FailureKind, Phase, RunDir, Writer, names, violations
from schemas.vocab import STATE_TRANSITIONS

FP = "c" * 64


def test_the_step_table_runs_every_phase_once_in_order() -> None:
    phases = [s.phase for s in STARTUP_STEPS + RUN_STEPS]
    assert phases == [p for p in Phase if p is not Phase.TEARDOWN]  # teardown ends every path


def test_every_state_is_reachable_and_final_states_are_final() -> None:
    reached = {AgentState.INIT}
    frontier = [AgentState.INIT]
    while frontier:
        for nxt in STATE_TRANSITIONS[frontier.pop()]:
            if nxt not in reached:
                reached.add(nxt)
                frontier.append(nxt)
    assert reached == set(AgentState)
    assert not STATE_TRANSITIONS[AgentState.SUCCEEDED] and not STATE_TRANSITIONS[AgentState.FAILED]
    assert AgentState.SUCCEEDED not in STATE_TRANSITIONS[AgentState.STARTING]  # success only after running


def test_phase_log_enforces_the_transitions(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "states", mode=0o750)
    lines: list[str] = []
    log = PhaseLog(run, Writer(FP, 0, "me"), 0, lines.append)
    with pytest.raises(IllegalTransition):
        log.set_state(AgentState.RUNNING)  # INIT -> RUNNING skips the startup
    for state in (AgentState.STARTING, AgentState.RUNNING, AgentState.STOPPING, AgentState.SUCCEEDED):
        log.set_state(state)
    doc = run.read_json(names.phases(0))
    assert doc is not None and doc["state"] == "SUCCEEDED" and not violations("phases", doc)
    for state in AgentState:
        with pytest.raises(IllegalTransition):
            log.set_state(state)


def test_poll_until_returns_on_the_predicate_or_the_deadline() -> None:
    now = itertools.count(0.0, 0.5).__next__
    assert poll_until(lambda: True, deadline=0.0, interval=0.001, now=now)
    calls = []
    assert not poll_until(lambda: calls.append(1) is not None, deadline=5.0, interval=0.001, now=now)
    assert 1 <= len(calls) <= 12


def test_poll_until_raises_as_soon_as_the_signal_trips() -> None:
    signal = FailureSignal()
    failure = Failure(kind=FailureKind.SIGNAL, cause="received SIGTERM")
    with pytest.raises(AgentFailed) as err:
        poll_until(lambda: signal.trip(failure) and False, deadline=float("inf"), interval=60.0, signal=signal)
    assert err.value.failure is failure


def test_reaper_protocol_round_trips_and_ignores_torn_lines() -> None:
    stream = io.StringIO()
    channel = ReaperChannel(stream)
    channel.group("ray-head", 4242)
    channel.phase("driver")
    channel.temp_dir("/tmp/gr-x y")  # a space in a path is no longer a protocol problem
    lines = stream.getvalue().splitlines()
    state = ReaperState()
    for line in [*lines, '{"group": "half', "not json", "[1]"]:
        state.apply(line)
    assert state.sessions == {4242: "ray-head"} and state.phase == "driver"
    assert state.temp_dirs == ["/tmp/gr-x y"] and not state.done
    state.apply('{"done": true}')
    assert state.done


def test_a_failure_record_that_breaks_its_schema_is_not_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = RunDir.create(tmp_path, "fallback", mode=0o750)
    bad = Failure(kind="no-such-kind", cause="boom", phase="driver")  # type: ignore[arg-type]
    assert write_failure_record(run, Writer(FP, 3, "me"), 3, bad, "driver")
    doc = run.read_json(names.failure(3))
    assert doc is not None and not violations("failure", doc)
    assert doc["kind"] == "internal" and "no-such-kind" in doc["cause"] and "boom" in doc["cause"]
    assert "rejected by its schema" in capsys.readouterr().err


def test_the_failure_record_is_built_in_one_place(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "one", mode=0o750)
    failure = Failure(
        kind=FailureKind.PEER_FAILURE,
        cause="rank 1 failed",
        phase="driver",
        reacting_to={"rank": 1, "incarnation": "p1", "kind": "judge"},
        peers=(1,),
    )
    assert write_failure_record(run, Writer(FP, 0, "me"), 0, failure, "ignored")
    doc = run.read_json(names.failure(0))
    assert doc is not None and not violations("failure", doc)
    assert (doc["kind"], doc["phase"], doc["peers"], doc["reacting_to"]["rank"]) == ("peer_failure", "driver", [1], 1)
