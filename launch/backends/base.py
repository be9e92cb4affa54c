"""What every backend shares: the render request and its result, the submission, the one backend
type each backend instantiates, its error, and the one builder of the agent's command line.

A backend renders (pure: from the resolved model and its plan to the text a scheduler takes),
submits (the side effect: hand the rendered job to the scheduler) and answers `gym-launch status`
(a read-only question). Each sits in the backend's own package; this module holds only what they
have in common.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from launch.backends.answers import SchedulerView
from launch.spec.config import RunConfig
from launch.spec.errors import GymError, Problem
from launch.spec.plan import Plan
from schemas import RunDir, credentials

__all__ = [
    "EXIT_USAGE",
    "Backend",
    "RenderRequest",
    "Rendered",
    "Submission",
    "SubmitError",
    "agent_argv",
    "container_problems",
    "pinned_agent_argv",
    "shared_root_problem",
]

EXIT_USAGE = 2  # what a user can fix (the spec, the command line, the scheduler's setup), as argparse exits


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

    def __post_init__(self) -> None:
        # The second line (schemas.credentials): what a check missed never reaches a job file.
        object.__setattr__(self, "text", credentials.redact_text(self.text))


@dataclass(frozen=True)
class Submission:
    """What the scheduler answered: its id for the job, and the command that submitted it."""

    job_id: str
    command: tuple[str, ...]


class SubmitError(GymError):
    """The scheduler refused the job, or cannot be reached; the message says what it said."""

    exit_code = EXIT_USAGE


def pinned_agent_argv(
    request: RenderRequest, program: str, rank: str | None = None, replicas: int | None = None
) -> tuple[str, ...]:
    """The command line of an agent that finds the spec in the run directory (Beaker, SkyPilot):
    pinned to the spec's fingerprint; --resume continues a run another launch started (restart
    mode alone would refuse it)."""
    return agent_argv(
        (program,),
        request.uuid,
        request.output_root,
        expect_fingerprint=request.config.fingerprint,
        rank=rank,
        replicas=replicas,
        resume=request.resume,
    )


def _under(path: str, mount: str) -> bool:
    return path == mount or path.startswith(mount.rstrip("/") + "/")


def shared_root_problem(
    request: RenderRequest, backend: str, mounts: Sequence[str], key: str, absolute: str
) -> Problem | None:
    """The replicas coordinate through the output root, so it must be an absolute path (where:
    ``absolute``, in the backend's words) inside a filesystem every replica mounts: one of
    ``mounts`` (the spec's ``key``), where there are any."""
    given, root = request.output_root_given, request.output_root
    if not posixpath.isabs(given):
        return Problem("output.root", f"is relative ({given!r}); a {backend} run needs an absolute path {absolute}")
    if mounts and not any(_under(root, m) for m in mounts):
        return Problem(
            "output.root",
            f"{root} is not inside {key} ({', '.join(mounts)}); the replicas coordinate through it, so it must be "
            "on a filesystem every replica mounts",
        )
    return None


def _nothing_to_check() -> None:
    """Nothing to ask before submitting."""


@dataclass(frozen=True)
class Backend:
    """One way of running a run, as the launcher drives it: each backend instantiates it with its
    own steps (``SLURM`` in launch/backends/slurm/submit.py, ...). ``schedules``: it hands a
    rendered job to a scheduler (``gym-launch render|submit``); the one that does not runs every
    replica here (``gym-launch local``)."""

    name: str  # as ``[launch] backend`` and ``--backend`` spell it
    title: str  # as people spell it ("SkyPilot")
    # The job's text; raises SpecError with every problem (pure).
    render: Callable[[RenderRequest], Rendered]
    # Hand the rendered job (already written at the path, in the run directory) to the scheduler.
    submit: Callable[[Path, RunDir, RunConfig], Submission]
    # Raises SubmitError when nothing could be submitted (before the run directory exists).
    preflight: Callable[[], None] = _nothing_to_check
    # What the scheduler says of a submitted job (its id, the planned replicas): `gym-launch status`.
    view: Callable[[str, int | None], SchedulerView] | None = None
    schedules: bool = True


def agent_argv(
    program: Sequence[str],
    uuid: str,
    output_root: str,
    *,
    config: str | None = None,
    overrides: Sequence[str] = (),
    expect_fingerprint: str | None = None,
    rank: str | None = None,
    replicas: int | None = None,
    address: str | None = None,
    launcher_fd: int | None = None,
    resume: bool = False,
) -> tuple[str, ...]:
    """``gym-agent``'s command line, in one order for every backend. ``rank`` and ``address`` are
    strings: a batch script passes a shell expression the node expands (``$rank``)."""
    argv = [*program, "--uuid", uuid]
    if config is not None:
        argv += ["--config", config]
    argv += ["--output-root", output_root]
    for override in overrides:
        argv += ["--set", override]
    if expect_fingerprint is not None:
        argv += ["--expect-fingerprint", expect_fingerprint]
    if rank is not None:
        argv += ["--rank", rank]
    if replicas is not None:
        argv += ["--replicas", str(replicas)]
    if address is not None:
        argv += ["--address", address]
    if launcher_fd is not None:
        argv += ["--launcher-fd", str(launcher_fd)]
    if resume:
        argv.append("--resume")
    return tuple(argv)


def container_problems(config: RunConfig, where: str) -> list[Problem]:
    """A service's ``container`` is a Slurm step's (Pyxis): refused where there is no such step."""
    return [
        Problem(
            f"{key}.container",
            f"runs the service in a container of its own as a Slurm step (Pyxis), which {where} has not: render or "
            "submit with --backend slurm, or remove it (the agent then starts the service in its own environment)",
        )
        for key, svc in config.services().items()
        if svc.container is not None
    ]
