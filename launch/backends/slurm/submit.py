"""Hand a rendered batch script to Slurm (``sbatch --parsable``), and the backend the launcher
drives: the render (_render.py) beside this submission."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from launch.backends.base import Backend, Submission, SubmitError
from launch.backends.slurm import query
from launch.backends.slurm._render import render
from launch.spec.config import RunConfig
from schemas import RunDir

__all__ = ["SLURM", "submit"]

SBATCH_TIMEOUT_S = 120


def submit(job_path: Path, run: RunDir, config: RunConfig) -> Submission:
    """``sbatch`` the script at ``job_path`` from the run directory (``config``: unused, every
    backend's submit takes it)."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise SubmitError("sbatch is not on PATH: submit from a Slurm login node (or use --dry-run)")
    command = (sbatch, "--parsable", str(job_path))
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=SBATCH_TIMEOUT_S, cwd=run.path)
    except subprocess.TimeoutExpired:
        raise SubmitError(f"sbatch did not answer within {SBATCH_TIMEOUT_S} s (is slurmctld up?)") from None
    if out.returncode != 0:
        raise SubmitError(f"sbatch refused the job: {(out.stderr or out.stdout).strip()}")
    # --parsable prints "JOBID" or "JOBID;CLUSTER".
    return Submission(out.stdout.strip().split(";", 1)[0], command)


# Nothing to ask before submitting: a missing sbatch is said when submitting.
SLURM = Backend("slurm", "Slurm", render=render, submit=submit, view=query.view)
