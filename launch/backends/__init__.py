"""The launcher's backends, one module each (the render and the submit side by side), and the one
list of them that the CLI's choices, ``render``, ``submit`` and their errors read.

``[launch] backend`` is spelled by the pure spec model (``launch.spec.names.LAUNCH_BACKENDS``,
which may not import this package); a test keeps the two the same.
"""

from __future__ import annotations

from launch.backends.base import Backend, Rendered, RenderRequest, Submission, SubmitError
from launch.backends.beaker import BEAKER
from launch.backends.local import LOCAL
from launch.backends.skypilot import SKYPILOT
from launch.backends.slurm import SLURM
from launch.spec.errors import UsageError

BACKENDS: tuple[Backend, ...] = (LOCAL, SLURM, BEAKER, SKYPILOT)

__all__ = [
    "BACKENDS",
    "Backend",
    "RenderRequest",
    "Rendered",
    "Submission",
    "SubmitError",
    "backend",
    "scheduler_names",
]


def scheduler_names() -> tuple[str, ...]:
    """The backends that render a job for a scheduler (``--backend`` of render and submit)."""
    return tuple(b.name for b in BACKENDS if b.schedules)


def backend(name: str) -> Backend:
    for b in BACKENDS:
        if b.name == name:
            return b
    raise UsageError(f"unknown backend {name!r}; choose {' or '.join(b.name for b in BACKENDS)}")
