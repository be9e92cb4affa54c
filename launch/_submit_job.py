"""`gym-launch submit`: a rendered job into a new run directory, then to its scheduler.

The CLI validates the spec and renders once (every problem reported before anything exists);
``submit`` then claims ``OUTPUT/cluster/UUID`` (refusing a used UUID unless ``--resume``), writes
``spec.json`` (every replica's agent loads it, so all of them run the same fingerprint), the
rendered job (``job.sbatch``, ``job.beaker.yaml``, ``job.skypilot.yaml``) and, once the scheduler took it,
``submission.json`` (backend, job id, the job file, the command, when). ``--dry-run`` prints what
would be submitted and creates nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from launch.backends.base import Backend, Rendered, RenderRequest, SubmitError
from launch.backends.rundir import claim_run_dir, write_job, write_submission
from schemas import names

__all__ = ["EXIT_OK", "submit"]

EXIT_OK = 0


def submit(
    request: RenderRequest,
    backend: Backend,
    rendered: Rendered,
    *,
    spec_source: str,
    dry_run: bool,
    out: Callable[[str], None],
) -> int:
    """Submit ``rendered`` (``backend``'s render of ``request``); ``spec_source``: the spec as given."""
    where = Path(request.output_root) / "cluster" / request.uuid / names.job_file(rendered.file_name)

    def print_instead(why: str) -> None:
        out(f"# gym-launch submit {why}: {backend.name} job for run {request.uuid} (nothing was created)")
        out(f"# it would be written to {where}")
        sys.stdout.write(rendered.text)

    if dry_run:
        print_instead("--dry-run")
        return EXIT_OK
    try:
        backend.preflight()  # e.g. no Beaker client or configuration: said before anything is created
    except SubmitError as exc:
        # Show what would have been submitted (and fail: it was not).
        print_instead(f"without a {backend.title} client")
        raise SubmitError(f"{exc}; the spec was printed instead of submitted") from None
    config = request.config
    run = claim_run_dir(request.output_root, request.uuid, config, spec_source, resume=request.resume)
    try:
        job = write_job(run, rendered)
        submission = backend.submit(job, run, config)
        write_submission(run, config, backend.name, job, submission)
    finally:
        run.close()
    out(f"gym-launch: submitted run {request.uuid} to {backend.name} as job {submission.job_id}")
    out(f"gym-launch: run directory {run.path}")
    return EXIT_OK
