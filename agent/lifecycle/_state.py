"""The agent's overall state, changed only along `schemas.vocab.STATE_TRANSITIONS`.

The state machine owns the state; the phase log observes it (prints it with every phase line and
keeps `phases-RANK.json` current). A change the table does not allow is an agent bug: it raises
`IllegalTransition`, which the lifecycle records as `internal`.
"""

from __future__ import annotations

from collections.abc import Callable

from schemas.vocab import STATE_TRANSITIONS, AgentState

__all__ = ["IllegalTransition", "StateMachine"]


class IllegalTransition(RuntimeError):
    """An agent bug: a state change STATE_TRANSITIONS does not allow."""


class StateMachine:
    """The one owner of the agent's state; observers hear every allowed change, in order."""

    def __init__(self, state: AgentState = AgentState.INIT) -> None:
        self._state = state
        self._observers: list[Callable[[AgentState], None]] = []

    @property
    def state(self) -> AgentState:
        return self._state

    @property
    def final(self) -> bool:
        return not STATE_TRANSITIONS[self._state]

    def observe(self, observer: Callable[[AgentState], None]) -> None:
        self._observers.append(observer)

    def advance(self, state: AgentState) -> None:
        """Change to `state`, or raise IllegalTransition (nothing changes, no observer hears it)."""
        if state not in STATE_TRANSITIONS[self._state]:
            raise IllegalTransition(f"agent state {self._state} -> {state} is not allowed")
        self._state = state
        for observer in self._observers:
            observer(state)

    def __str__(self) -> str:
        return str(self._state)
