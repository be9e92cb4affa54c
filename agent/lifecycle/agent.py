"""One replica's lifecycle: two tables of steps run in order, under an enforced overall state.

    INIT -> STARTING (STARTUP_STEPS) -> RUNNING (RUN_STEPS) -> STOPPING -> SUCCEEDED
    any failure, from INIT, STARTING or RUNNING:               STOPPING -> FAILED

INIT (init.py) gives the Agent its start: the spec, the identity, the run directory with this
rank claimed, the printer and the doorbell. The tables are data (steps.py: each step's phase, the
nodes it applies to, what runs it); the agreement steps (_agreement.py) produce the topology, and
each later step's action is a runtime's method bound to it (_actions.py). The state is the state
machine's (_state.py), observed by the phase log (_phase_log.py). Any failure (a child exits, the
driver fails, SIGTERM/SIGINT, a peer's failure record, a silent peer, the single startup deadline)
writes this replica's failure record (_failure_writer.py), stops every local process group and
writes its cleanup record (_teardown.py); the agent then exits non-zero.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial

from agent.coord.topology import Topology
from agent.ground.failure import AgentFailed, Failure, FailureSignal
from agent.lifecycle import _wiring as wiring
from agent.lifecycle._actions import Action, bind
from agent.lifecycle._agreement import reach_agreement
from agent.lifecycle._doorbell_link import DoorbellLink
from agent.lifecycle._failure_writer import FailureWriter
from agent.lifecycle._hang_stacks import walltime_failure
from agent.lifecycle._phase_log import PhaseLog
from agent.lifecycle._running import Running
from agent.lifecycle._state import StateMachine
from agent.lifecycle._teardown import RunResult, Teardown
from agent.lifecycle.init import Joined
from agent.lifecycle.steps import PLACED_STEPS, RUN_STEPS, Step, applies
from agent.ray.node import PortsError
from schemas import AgentState, FailureKind, Phase, RunDirError, names

__all__ = ["Agent", "RunResult"]

log = logging.getLogger(__name__)


class Agent:
    """Walks one replica from INIT's result to its RunResult; `signal` is its first failure."""

    def __init__(self, joined: Joined) -> None:
        self.joined = joined
        self.rank = joined.ident.rank
        self.signal = FailureSignal()
        self.states = StateMachine()
        self.log = PhaseLog(joined.run, joined.writer, self.rank, joined.out, self.states)
        self.deadline = joined.started_mono + joined.config.coordination.startup_timeout
        # First listener of the signal: the record is on its way before anything else reacts.
        self.failure_writer = FailureWriter(joined, self.signal, self.log.phase_name)
        self.bell = DoorbellLink(joined, self.signal)
        self.teardown = Teardown(joined, self.states, self.log, self.failure_writer, self.bell)

    def run_lifecycle(self) -> RunResult:
        running = wiring.start(self.joined, self.signal, self.log, self.bell, self.deadline)
        self._walk(running)
        failure = self.signal.failure
        if failure is not None:
            return self.teardown.failed(running, failure)
        return self.teardown.succeeded(running)

    def _walk(self, running: Running) -> None:
        """STARTING and RUNNING; whatever ends them early trips the signal with its cause."""
        try:
            self.states.advance(AgentState.STARTING)
            topo = reach_agreement(running, self.joined.ident, self.bell, self.log)
            self._placed(running, topo)
            actions = bind(running, topo)
            self._run_steps(PLACED_STEPS, actions, topo)
            self.states.advance(AgentState.RUNNING)
            self._run_steps(RUN_STEPS, actions, topo)
        except AgentFailed as exc:
            self.signal.trip(exc.failure)
        except RunDirError as exc:
            self.signal.trip(self._unexpected(FailureKind.RUN_DIR, str(exc)))
        except PortsError as exc:
            self.signal.trip(self._unexpected(FailureKind.PORTS, str(exc)))
        except Exception as exc:  # noqa: BLE001 - an agent bug still must clean up and say why
            # The record says what; the agent's log keeps where (a bug's call, or an OSError no step names).
            log.error("internal error in phase %s", self.log.phase_name(), exc_info=exc)
            self.signal.trip(self._unexpected(FailureKind.INTERNAL, f"{type(exc).__name__}: {exc}"))

    def _placed(self, running: Running, topo: Topology) -> None:
        """What the topology settles: the driver's grace, the walltime warning's reading, whose
        stacks wait for the others'."""
        running.driver.arm_grace(topo)
        running.liveness.on_walltime = partial(walltime_failure, running.ctx, topo, running.driver, running.stacks)
        running.stacks.driver_node = topo.is_driver_node

    def _run_steps(self, steps: tuple[Step, ...], actions: Mapping[Phase, Action], topo: Topology) -> None:
        for step in steps:
            if not applies(step, topo, bool(self.joined.config.ray.enabled)):
                continue
            action = actions[step.phase]
            self.log.begin(step.phase, action.detail() if action.detail else "")
            self.log.end(detail=action.run())

    def _unexpected(self, kind: FailureKind, cause: str) -> Failure:
        return Failure(kind=kind, cause=cause, phase=self.log.phase_name(), log=names.agent_log(self.rank))
