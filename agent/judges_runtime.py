"""The judge phases of the lifecycle: start managed judges, health, registry, canaries.

A clean seam: with no bound judge every step is a no-op. Filled in by the judges issue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .lifecycle import Agent


class JudgeRuntime:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def start_local(self) -> int:
        """Start this node's managed judges in their own process groups; returns how many."""
        return 0

    def wait_local_healthy(self) -> None:
        """Wait (inside the startup deadline) until this node's managed judges answer /health."""

    def write_registry(self) -> None:
        """registry.json: judges with endpoints, rubrics with digests, bindings."""

    def run_canaries(self) -> str:
        """Known-good vs known-bad through every binding; raises AgentFailed on any failure."""
        return "no bindings"

    def driver_env(self) -> dict[str, str]:
        return {}
