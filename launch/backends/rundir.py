"""The launcher's writes into a run directory: claiming it (a new run, or a new attempt with
``--resume``), its spec.json, the rendered job and submission.json. ``gym-launch local``,
``submit`` and ``regrade`` all claim through ``claim_run_dir``: one used-uuid/``--resume`` rule.
"""

from __future__ import annotations

import time
from pathlib import Path

from launch.backends.base import Rendered, Submission
from launch.spec.config import RunConfig
from launch.spec.errors import UsageError
from launch.spec.load import spec_differences, spec_record
from launch.spec.run_record import run_spec_record
from schemas import RunDir, Writer, WriterKind, names, records

__all__ = ["claim_run_dir", "launcher_writer", "write_job", "write_submission"]


def launcher_writer(config: RunConfig) -> Writer:
    return Writer(config.fingerprint, None, "launcher", kind=WriterKind.LAUNCHER)


def claim_run_dir(
    output_root: str | Path, uuid: str, config: RunConfig, source: str, *, resume: bool, resumable: bool = True
) -> RunDir:
    """Create (or open) OUTPUT/cluster/UUID for this run and write its spec.json (``source``: where
    the spec was read). A used directory is refused unless ``resume`` and the spec is the same
    (by fingerprint); ``resumable`` says whether the refusal may suggest ``--resume``."""
    run = RunDir.create(output_root, uuid, mode=config.dir_mode)
    try:
        recorded = run.read_json(names.SPEC)
        if recorded is not None and not resume:
            hint = " (or --resume it)" if resumable else ""
            raise UsageError(f"run directory {run.path} already holds a run; pick a new --uuid{hint}")
        if recorded is not None and recorded.get("fingerprint") != config.fingerprint:
            keys = spec_differences(recorded.get("spec") or {}, spec_record(config.spec, "")["spec"])
            raise UsageError(
                f"--resume: the spec differs from the one run {uuid} was started with "
                f"(keys: {', '.join(keys) or '(spelling only)'}); resume with {run.path / names.SPEC} or restore them"
            )
        if recorded is None:
            run.write_artifact(names.SPEC, launcher_writer(config), run_spec_record(config, source))
    except BaseException:
        run.close()
        raise
    return run


def write_job(run: RunDir, rendered: Rendered) -> Path:
    """The rendered job, as the scheduler reads it from the run directory; returns its path."""
    rel = names.job_file(rendered.file_name)
    run.write_bytes(rel, rendered.text.encode("utf-8"))
    return run.path / rel


def write_submission(run: RunDir, config: RunConfig, backend: str, job: Path, submission: Submission) -> None:
    run.write_artifact(
        names.SUBMISSION,
        launcher_writer(config),
        records.submission_fields(
            backend=backend,
            job_id=submission.job_id,
            job_file=str(job.relative_to(run.path)),
            command=submission.command,
            submitted_at=time.time(),
        ),
    )
