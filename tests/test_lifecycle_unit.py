"""Lifecycle parts without processes: the step table, the enforced state machine, the one
polling helper, the reaper's line protocol and the one failure-record writer."""

from __future__ import annotations

import functools
import io
import itertools
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from agent.coord.failure_record import write_failure_record
from agent.ground.failure import AgentFailed, Failure, FailureSignal
from agent.ground.reaper_channel import ReaperChannel, ReaperState
from agent.ground.waits import poll_until
from agent.lifecycle import _agreement as agreement
from agent.lifecycle import _teardown as teardown
from agent.lifecycle import steps
from agent.lifecycle._actions import bind
from agent.lifecycle._phase_log import PhaseLog
from agent.lifecycle._running import Running
from agent.lifecycle._state import IllegalTransition, StateMachine
from agent.lifecycle.steps import AGREEMENT_STEPS, PLACED_STEPS, RUN_STEPS, STARTUP_STEPS, TEARDOWN, Nodes, applies
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


def test_the_state_machine_refuses_an_illegal_transition_and_tells_no_observer() -> None:
    states = StateMachine()
    heard: list[AgentState] = []
    states.observe(heard.append)
    with pytest.raises(IllegalTransition, match="INIT -> RUNNING is not allowed"):
        states.advance(AgentState.RUNNING)  # INIT -> RUNNING skips the startup
    assert states.state is AgentState.INIT and not heard
    path = (AgentState.STARTING, AgentState.RUNNING, AgentState.STOPPING, AgentState.SUCCEEDED)
    for state in path:
        states.advance(state)
        assert str(states) == str(state)
    assert heard == list(path) and states.final
    for state in AgentState:
        with pytest.raises(IllegalTransition):
            states.advance(state)
    assert heard == list(path)


def test_every_allowed_transition_is_taken_and_every_other_refused() -> None:
    for origin in AgentState:
        for target in AgentState:
            states = StateMachine(origin)
            if target in STATE_TRANSITIONS[origin]:
                states.advance(target)
                assert states.state is target
            else:
                with pytest.raises(IllegalTransition):
                    states.advance(target)
                assert states.state is origin


def test_the_phase_log_observes_the_state_machine(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "states", mode=0o750)
    lines: list[str] = []
    states = StateMachine()
    log = PhaseLog(run, Writer(FP, 0, "me"), 0, lines.append, states)
    states.advance(AgentState.STARTING)
    doc = run.read_json(names.phases(0))
    assert doc is not None and doc["state"] == "STARTING" and not violations("phases", doc)
    log.begin(Phase.RENDEZVOUS, "rank 0/1")
    log.end()
    assert lines[0] == "STARTING rendezvous ... rank 0/1" and lines[1].startswith("STARTING rendezvous ok (")
    for state in (AgentState.RUNNING, AgentState.STOPPING, AgentState.SUCCEEDED):
        states.advance(state)
    doc = run.read_json(names.phases(0))
    assert doc is not None and doc["state"] == "SUCCEEDED" and not violations("phases", doc)
    assert [e["phase"] for e in doc["phases"]] == ["rendezvous"]


def _name(fn: object) -> str:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return str(getattr(fn, "__qualname__", fn))


def test_every_step_names_what_runs_it() -> None:
    """The table prints what runs each step: for a placed or run step the callable the agent's
    binding gives it (a runtime's method, or a lifecycle function); the agreement steps and the
    teardown are run by the functions they name."""
    hints = typing.get_type_hints(Running)
    # Nothing is started: binding only looks the methods up.
    parts = {field: object.__new__(typing.get_origin(kind) or kind) for field, kind in hints.items()}
    bound = bind(Running(**parts), object())  # type: ignore[arg-type]
    printed = {s.phase: s.runs for s in PLACED_STEPS + RUN_STEPS}
    assert {phase: _name(action.run) for phase, action in bound.items()} == printed
    assert [s.runs for s in AGREEMENT_STEPS] == [agreement.rendezvous.__name__, agreement.agree_plan.__name__]
    assert TEARDOWN.runs == teardown.stop_everything.__name__
    assert STARTUP_STEPS == AGREEMENT_STEPS + PLACED_STEPS


def test_the_agreement_steps_run_on_every_node_before_the_topology_exists() -> None:
    assert STARTUP_STEPS[: len(AGREEMENT_STEPS)] == AGREEMENT_STEPS
    assert [s.phase for s in AGREEMENT_STEPS] == [Phase.RENDEZVOUS, Phase.PLAN_AGREEMENT]
    assert all(s.nodes is Nodes.ALL and not s.needs_ray for s in AGREEMENT_STEPS)


class _Node:
    def __init__(self, *, head: bool, driver: bool, ray: bool) -> None:
        self.is_head, self.is_driver_node, self.in_ray = head, driver, ray


def test_each_step_applies_to_the_nodes_it_names() -> None:
    by_phase = {s.phase: s for s in STARTUP_STEPS + RUN_STEPS}
    head = _Node(head=True, driver=True, ray=True)
    ray_worker = _Node(head=False, driver=False, ray=True)
    outside = _Node(head=False, driver=False, ray=False)
    assert applies(by_phase[Phase.RAY_START], ray_worker, True) and not applies(
        by_phase[Phase.RAY_START], outside, True
    )
    assert not applies(by_phase[Phase.RAY_START], head, False)  # Ray steps only with [ray] enabled
    assert applies(by_phase[Phase.READINESS], head, True) and not applies(by_phase[Phase.READINESS], ray_worker, True)
    assert applies(by_phase[Phase.CANARIES], head, False) and not applies(by_phase[Phase.CANARIES], ray_worker, False)
    assert all(applies(by_phase[p], outside, True) for p in (Phase.DATA_CHECK, Phase.DRIVER, Phase.ACKNOWLEDGE))


def test_the_step_table_prints_without_importing_the_runtime() -> None:
    code = (
        "import sys, agent.lifecycle.steps as s; s.main([]); "
        "loaded = [m for m in ('agent.lifecycle.agent', 'agent.proc.supervisor', 'agent.ray.node', "
        "'agent.judges.runtime', 'agent.coord.context') if m in sys.modules]; "
        "assert not loaded, loaded"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == steps.text()


def test_gym_agent_steps_prints_the_table_and_exits_0_without_a_uuid() -> None:
    done = subprocess.run([sys.executable, "-m", "agent.cli", "--steps"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed[0].split() == ["STATE", "PHASE", "NODES", "RUNS", "WHAT", "IT", "DOES"]
    phases = [line.split()[1] if not line.startswith(" ") else line.split()[0] for line in printed[1:]]
    assert phases == [str(p) for p in Phase]
    assert printed[1].startswith("STARTING  rendezvous") and "RayRuntime.readiness" in done.stdout


def test_architecture_md_shows_the_generated_step_table() -> None:
    doc = (Path(__file__).resolve().parents[1] / "ARCHITECTURE.md").read_text()
    assert doc.count(steps.BEGIN_MARKER) == 1 and doc.count(steps.END_MARKER) == 1
    assert steps.replace_table(doc) == doc, "regenerate it: python -m agent.lifecycle.steps --update ARCHITECTURE.md"


def test_the_markdown_table_has_one_row_per_phase_under_its_state() -> None:
    table = steps.markdown().splitlines()
    assert table[0] == "| state | phase | nodes | what it runs |"
    body = [row.split(" | ") for row in table[2:]]
    assert [cells[1].strip("`") for cells in body] == [str(p) for p in Phase]
    assert [c[0].strip("| ") for c in body if c[0].strip("| ")] == ["STARTING", "RUNNING", "STOPPING"]


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
