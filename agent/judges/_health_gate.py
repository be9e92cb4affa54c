"""How long a server's health check may take while it starts (seed 001: ``health_timeout``)."""

from __future__ import annotations

from typing import Protocol

from agent.coord.context import RunContext

__all__ = ["health_deadline"]


class _Checked(Protocol):
    @property
    def health_timeout(self) -> float | None: ...


def health_deadline(ctx: RunContext, svc: _Checked, started: float) -> tuple[float, str]:
    """(monotonic deadline, the bound in words): the service's own ``health_timeout`` from its start,
    never past the run's one startup deadline."""
    startup = f"startup_timeout {ctx.config.coordination.startup_timeout:g}s"
    if svc.health_timeout is None or started + svc.health_timeout >= ctx.deadline:
        return ctx.deadline, startup
    return started + svc.health_timeout, f"health_timeout {svc.health_timeout:g}s"
