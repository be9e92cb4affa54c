"""Create the Beaker experiment of a rendered spec with beaker-py's client, and the backend the
launcher drives: the render (_render.py) beside this submission.

The user's token stays where Beaker's own tools keep it: beaker-py reads the user's Beaker
configuration (``$BEAKER_CONFIG`` or ``~/.beaker/config.yml``, or ``BEAKER_TOKEN``). Nothing here
reads, prints or records it: the spec, the run directory and our output hold the experiment id,
the workspace and the job file only. Without a configuration the submission stops with a message
that says how to configure Beaker, or to use ``--dry-run``. beaker-py is an optional dependency
(``pip install 'gym-agent[beaker]'``): it is imported only when submitting.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from launch.backends.base import Backend, Submission, SubmitError
from launch.backends.beaker import query
from launch.backends.beaker._render import render
from launch.spec.config import RunConfig
from schemas import RunDir

__all__ = ["BEAKER", "experiment_name", "submit"]

NO_CONFIG = (
    "no Beaker configuration found (neither $BEAKER_CONFIG, ~/.beaker/config.yml nor BEAKER_TOKEN): configure "
    "Beaker's client as usual (`beaker config set user_token ...`), or use --dry-run to print the spec"
)


def experiment_name(config: RunConfig, run: RunDir) -> str:
    """Run name plus uuid: letters, digits, '.', '_' and '-', as Beaker names require."""
    return f"{config.name}-{run.path.name}"


def _client(workspace: str | None) -> Any:
    try:
        from beaker import Beaker
        from beaker.exceptions import BeakerConfigurationError
    except ImportError:
        raise SubmitError(f"beaker-py is not installed: {query.INSTALL_HINT} (or use --dry-run)") from None
    try:
        overrides = {"default_workspace": workspace} if workspace else {}
        # No upgrade check: it is a network call of its own, and not ours to make.
        return Beaker.from_env(check_for_upgrades=False, **overrides)
    except BeakerConfigurationError:
        raise SubmitError(NO_CONFIG) from None
    except (OSError, ValueError, TypeError) as exc:
        # A broken config file: say which, not what it holds.
        where = os.environ.get("BEAKER_CONFIG") or "~/.beaker/config.yml"
        raise SubmitError(f"cannot read the Beaker configuration ({where}): {type(exc).__name__}") from None


def preflight() -> None:
    """No beaker-py or no Beaker configuration: said before anything is created."""
    _client(None)


def submit(job_path: Path, run: RunDir, config: RunConfig) -> Submission:
    """Create the experiment from ``job_path`` (the rendered spec in the run directory)."""
    workspace = config.launch.beaker.workspace
    client = _client(workspace)  # first: it says what to do when beaker-py or a configuration is missing
    from beaker import BeakerExperimentSpec

    spec = BeakerExperimentSpec.from_file(job_path)
    name = experiment_name(config, run)
    command: tuple[str, ...] = ("beaker-py", "experiment.create", "--name", name)
    command += ("--workspace", workspace) if workspace else ()
    command += (str(job_path),)
    try:
        with client:
            workload = client.experiment.create(spec=spec, name=name, workspace=workspace)
    except Exception as exc:  # beaker-py raises its own errors, gRPC's and requests'
        raise SubmitError(f"Beaker refused the experiment {name}: {type(exc).__name__}: {exc}") from None
    experiment_id = getattr(getattr(workload, "experiment", None), "id", "") or getattr(workload, "id", "")
    if not experiment_id:
        raise SubmitError(f"Beaker accepted experiment {name} but returned no id")
    return Submission(str(experiment_id), command)


BEAKER = Backend("beaker", "Beaker", render=render, submit=submit, preflight=preflight, view=query.view)
