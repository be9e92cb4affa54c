"""The one list of backends, which the CLI's choices, ``render``, ``submit``, ``status`` and their
errors read.

``[launch] backend`` is spelled by the pure spec model (``launch.spec.names.LAUNCH_BACKENDS``,
which may not import this package); a test keeps the two the same.
"""

from __future__ import annotations

from launch.backends.base import Backend
from launch.backends.beaker.submit import BEAKER
from launch.backends.local import LOCAL
from launch.backends.skypilot.submit import SKYPILOT
from launch.backends.slurm.submit import SLURM
from launch.spec.errors import UsageError

__all__ = ["BACKENDS", "backend", "scheduler_names"]

BACKENDS: tuple[Backend, ...] = (LOCAL, SLURM, BEAKER, SKYPILOT)


def scheduler_names() -> tuple[str, ...]:
    """The backends that render a job for a scheduler (``--backend`` of render and submit)."""
    return tuple(b.name for b in BACKENDS if b.schedules)


def backend(name: str) -> Backend:
    for b in BACKENDS:
        if b.name == name:
            return b
    raise UsageError(f"unknown backend {name!r}; choose {' or '.join(b.name for b in BACKENDS)}")
