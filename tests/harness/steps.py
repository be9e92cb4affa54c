"""The agent's own step table and its rule of which node runs which step, for fixtures and bench.

The one place tests and bench import the step table from: when the table moves (it is being
turned into data), only the import below changes.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from agent.lifecycle.agent import RUN_STEPS, STARTUP_STEPS, Agent, Step
from agent.lifecycle.context import Topology
from schemas import Phase

__all__ = ["RUN_STEPS", "STARTUP_STEPS", "Step", "applies", "lifecycle_phases"]


def applies(step: Step, topo: Topology, ray_enabled: bool) -> bool:
    """Whether the node `topo` runs `step`: the agent's own rule (Agent.applies), which reads only
    the Ray switch and the topology, on a stand-in that carries just those two."""
    stand_in = SimpleNamespace(config=SimpleNamespace(ray=SimpleNamespace(enabled=ray_enabled)), node_topo=topo)
    return Agent.applies(cast(Agent, stand_in), step)


def lifecycle_phases(topo: Topology | None = None, ray_enabled: bool = True) -> tuple[Phase, ...]:
    """Every phase a replica runs, in the agent's order, teardown last; with a topology only the
    steps that node runs."""
    steps = (*STARTUP_STEPS, *RUN_STEPS)
    chosen = [s.phase for s in steps if topo is None or applies(s, topo, ray_enabled)]
    return (*chosen, Phase.TEARDOWN)
