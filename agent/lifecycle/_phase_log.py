"""The phase log: one printed line per phase transition, and `phases-RANK.json` kept current.

It observes the state machine (the state printed with each line and saved with the phases) and
never changes the state itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from agent.ground import clock
from agent.lifecycle._state import StateMachine
from schemas import AgentState, Phase, PhaseOutcome, RunDir, Writer, names, records
from schemas.safe_io import Sync
from schemas.vocab import PHASE_INIT

__all__ = ["PhaseLog"]


class PhaseLog:
    """Prints one line per phase transition and keeps `phases-RANK.json` current."""

    def __init__(
        self, run: RunDir, writer: Writer, rank: int, out: Callable[[str], None], states: StateMachine
    ) -> None:
        self.run = run
        self.writer = writer
        self.rank = rank
        self.out = out
        self.states = states
        self.current: Phase | None = None
        self.entries: list[dict[str, Any]] = []
        self.node_index: int | None = None
        self.address: str | None = None
        self.on_phase: Callable[[str], None] = lambda _phase: None  # the reaper must know where we died
        self._lock = threading.Lock()
        states.observe(self._state_changed)

    def phase_name(self) -> str:
        return str(self.current) if self.current else PHASE_INIT

    def begin(self, phase: Phase, detail: str = "") -> None:
        with self._lock:
            self.current = phase
            self.entries.append(
                records.phase_entry(
                    phase=str(phase), started_at=clock.wall(), outcome=str(PhaseOutcome.RUNNING), detail=detail
                )
            )
        self.out(f"{self.states} {phase} ...{' ' + detail if detail else ''}")
        self.on_phase(str(phase))
        self._save()

    def end(self, outcome: PhaseOutcome = PhaseOutcome.OK, detail: str = "") -> None:
        with self._lock:
            if not self.entries or self.entries[-1]["outcome"] != PhaseOutcome.RUNNING:
                return
            e = self.entries[-1]
            e["ended_at"] = clock.wall()
            e["outcome"] = str(outcome)
            if detail:
                e["detail"] = detail
            took = e["ended_at"] - e["started_at"]
        self.out(f"{self.states} {e['phase']} {outcome} ({took:.2f}s){' ' + detail if detail else ''}")
        self._save()

    def _state_changed(self, _state: AgentState) -> None:
        self._save()

    def _save(self) -> None:
        state = self.states.state
        with self._lock:
            fields = records.phases_fields(
                state=str(state), node_index=self.node_index, address=self.address, entries=self.entries
            )
        # Rewritten at every transition: only the final state is fsynced (a crash of this host
        # loses at most the latest transitions; close() still publishes each to NFS readers).
        sync = Sync.BEFORE_RENAME if self.states.final else Sync.NONE
        try:
            self.run.write_artifact(names.phases(self.rank), self.writer, fields, sync=sync)
        except OSError:
            pass  # the timeline is evidence, not control: never fail the run over it
