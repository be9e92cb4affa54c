"""Launch a rendered SkyPilot task through SkyPilot's Python API, and the backend the launcher
drives: the render (_render.py) beside this submission.

SkyPilot's client talks to its API server (a local one `sky api start` runs, or a team's
`sky api login -e URL`); nothing here starts one or reads the clouds' credentials. Without the
``skypilot`` package (``pip install 'gym-agent[skypilot]'``) or without a server that answers, the
submission prints the task and the command that would run it and exits 2. Secrets are named, never
valued: a ``[launch] secrets`` variable is a SkyPilot secret of the same name, resolved by SkyPilot
(its value, when set in the submitting environment, is handed to the API in memory, as
``sky jobs launch --secret NAME`` does).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from launch.backends.base import Backend, Submission, SubmitError
from launch.backends.skypilot import query
from launch.backends.skypilot._render import cli_command, cluster_name, job_name, render
from launch.spec.config import RunConfig
from schemas import RunDir

__all__ = ["SKYPILOT", "preflight", "submit"]


def _sky() -> Any:
    try:
        import sky
    except ImportError:
        raise SubmitError(f"SkyPilot is not installed: {query.INSTALL_HINT} (or use --dry-run)") from None
    return sky


def preflight() -> None:
    """SkyPilot importable and its API server healthy. Asks the server's health endpoint only: a
    client call would start a local server, which is the user's to start."""
    _sky()
    from sky.server import common

    url = common.get_server_url()
    status = common.get_api_server_status(url).status
    if status != common.ApiServerStatus.HEALTHY:
        raise SubmitError(
            f"no SkyPilot API server answers at {url} ({status.value}): start one (`sky api start`, then "
            "`sky check`) or log in to your team's (`sky api login -e URL`)"
        )


def submit(job_path: Path, run: RunDir, config: RunConfig) -> Submission:
    """Launch the task at ``job_path`` (the rendered task in the run directory) through SkyPilot's API."""
    sky = _sky()
    uuid = run.path.name
    command = cli_command(config, uuid, str(job_path))
    # A secret's value set in this shell goes to SkyPilot in memory only, as `--secret NAME` does:
    # loaded by the loader `sky jobs launch` uses, with the same overrides.
    present = [(name, os.environ[name]) for name in sorted(config.launch.secrets) if os.environ.get(name)]
    try:
        from sky.utils import dag_utils

        dag = dag_utils.load_chain_dag_from_yaml(str(job_path), secret_overrides=present or None)
    except Exception as exc:  # SkyPilot's loader raises ValueError and its own schema errors
        raise SubmitError(f"SkyPilot refused the task {job_path}: {type(exc).__name__}: {exc}") from None
    try:
        if config.launch.skypilot.managed:
            job_ids, _handle = sky.stream_and_get(sky.jobs.launch(dag, name=job_name(config, uuid)))
            job_id = str(job_ids[0]) if job_ids else ""
        else:
            job, _handle = sky.stream_and_get(sky.launch(dag, cluster_name=cluster_name(config, uuid)))
            job_id = "" if job is None else f"{cluster_name(config, uuid)}/{job}"
    except Exception as exc:  # the API's own errors, the server's, the network's
        raise SubmitError(f"SkyPilot did not launch the task: {type(exc).__name__}: {exc}") from None
    if not job_id:
        raise SubmitError("SkyPilot accepted the task but returned no job id")
    return Submission(job_id, command)


SKYPILOT = Backend("skypilot", "SkyPilot", render=render, submit=submit, preflight=preflight, view=query.view)
