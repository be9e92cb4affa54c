"""The agent's own step table and its rule of which node runs which step, for fixtures and bench.

The one place tests and bench import the step table from (agent/lifecycle/steps.py: data, no runtime).
"""

from __future__ import annotations

from agent.coord.topology import Topology
from agent.lifecycle.steps import RUN_STEPS, STARTUP_STEPS, Step, applies
from schemas import Phase

__all__ = ["RUN_STEPS", "STARTUP_STEPS", "Step", "applies", "lifecycle_phases"]


def lifecycle_phases(topo: Topology | None = None, ray_enabled: bool = True) -> tuple[Phase, ...]:
    """Every phase a replica runs, in the agent's order, teardown last; with a topology only the
    steps that node runs."""
    steps = (*STARTUP_STEPS, *RUN_STEPS)
    chosen = [s.phase for s in steps if topo is None or applies(s, topo, ray_enabled)]
    return (*chosen, Phase.TEARDOWN)
