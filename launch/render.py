"""Rendering a run for a scheduler: pure functions from the resolved spec and its plan to the text a
scheduler takes (a Slurm batch script, a Beaker experiment spec). Submitting it is a side effect
and lives in ``agent.submit``; ``gym-launch render`` only prints or writes the text.

Each backend module registers one ``Renderer`` in ``RENDERERS`` (``launch.render_slurm``,
``launch.render_beaker``); they read only the resolved model (``RunConfig``) and the plan.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from launch.spec.config import RunConfig
from launch.spec.errors import UsageError
from launch.spec.plan import Plan

BACKEND_MODULES = {"slurm": "launch.render_slurm", "beaker": "launch.render_beaker"}


@dataclass(frozen=True)
class RenderRequest:
    """Everything a renderer may use. ``spec_path`` is what every replica's agent loads: the run
    directory's spec.json when submitting, else the spec file as given (absolute)."""

    config: RunConfig
    plan: Plan
    uuid: str
    output_root: str  # absolute
    spec_path: str  # absolute
    overrides: tuple[str, ...] = ()
    resume: bool = False
    output_root_given: str = ""  # as the user wrote it (a Beaker run refuses a relative root)
    workdir: str = ""  # absolute: where gym-launch ran; the job runs there (relative driver paths)


@dataclass(frozen=True)
class Rendered:
    backend: str
    text: str
    file_name: str  # how the submitter names it inside the run directory


Renderer = Callable[[RenderRequest], Rendered]


def renderer(backend: str) -> Renderer:
    try:
        module = importlib.import_module(BACKEND_MODULES[backend])
    except KeyError:
        raise UsageError(f"unknown backend {backend!r}; choose {' or '.join(BACKEND_MODULES)}") from None
    return module.render


def render(request: RenderRequest, backend: str) -> Rendered:
    return renderer(backend)(request)


def backends() -> Sequence[str]:
    return tuple(BACKEND_MODULES)
