"""`gym-launch regrade OUTPUT/cluster/UUID`: a judge-only job that grades a finished run's saved
answers again, submitted to Slurm (seed 003). The side effects around ``launch._regrade`` (pure):
reading the run's spec.json, the partition's MaxTime (`scontrol show partition`), the reader
placement from the environment, claiming the judge job's own run directory beside the run's (same
output root), writing its spec.json, regrade.json (the record naming the source run), job.sbatch
and submission.json, and running sbatch.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launch import _regrade as rg
from launch.backends.base import RenderRequest
from launch.backends.rundir import claim_run_dir, launcher_writer, write_job, write_submission
from launch.backends.slurm.query import partition_max_time
from launch.backends.slurm.submit import SLURM
from launch.spec.config import RunConfig
from launch.spec.errors import UsageError
from launch.spec.load import load_spec, resolved_from_dict
from launch.spec.plan import plan as make_plan
from schemas import names
from schemas.vocab import LauncherEnv

__all__ = ["EXIT_OK", "RegradeArgs", "load_source", "regrade"]

EXIT_OK = 0


@dataclass(frozen=True)
class RegradeArgs:
    """What `gym-launch regrade` was asked (its command line, typed)."""

    run_dir: str
    command: str
    judge_partition: str | None = None
    judge_qos: str | None = None
    uuid: str | None = None
    dry_run: bool = False
    json: bool = False


def load_source(run_dir: str) -> tuple[Path, RunConfig]:
    path = Path(run_dir).absolute()
    spec = path / names.SPEC
    if not spec.is_file():
        raise UsageError(f"{path}: no {names.SPEC}: not a run directory (give OUTPUT/cluster/UUID)")
    return path, RunConfig.from_spec(load_spec(spec))


def regrade(args: RegradeArgs, out: Callable[[str], None]) -> int:
    source_dir, source = load_source(args.run_dir)
    if not args.command.strip():
        raise UsageError("--command is empty; give the shell command that grades the saved answers")
    placement = rg.Placement(args.judge_partition, args.judge_qos, os.environ.get(LauncherEnv.READER_SRUN))
    _, partition, _ = rg.target_partition(source, placement)
    profile = rg.derive_profile(source, placement, partition_max_time(partition))
    data = rg.judge_job_spec(source, profile, args.command)
    config = RunConfig.from_spec(resolved_from_dict(data, str(source_dir)))
    root = str(source_dir.parent.parent)  # beside the run: OUTPUT/cluster/NEW
    uuid = args.uuid or names.new_uuid()
    if not names.UUID_RE.match(uuid):
        raise UsageError(f"--uuid {uuid!r}: use letters, digits, '_' and '-' (at most 128)")
    run_path = Path(root) / "cluster" / uuid
    request = RenderRequest(
        config=config,
        plan=make_plan(config),
        uuid=uuid,
        output_root=root,
        spec_path=str(run_path / names.SPEC),
        workdir=os.getcwd(),
    )
    rendered = SLURM.render(request)
    record = rg.source_record(str(source_dir), source_dir.name, source, profile, args.command)
    if args.dry_run:
        if args.json:
            out(json.dumps(profile.to_json(), indent=2))
        else:
            out(profile.text())
            out(f"# gym-launch regrade --dry-run: judge job for run {source_dir.name} (nothing was created)")
            out(f"# it would be written to {run_path / names.job_file(rendered.file_name)}")
            sys.stdout.write(rendered.text)
        return EXIT_OK
    run = claim_run_dir(root, uuid, config, str(source_dir / names.SPEC), resume=False, resumable=False)
    try:
        run.write_artifact(names.REGRADE, launcher_writer(config), record)
        job = write_job(run, rendered)
        submission = SLURM.submit(job, run, config)
        write_submission(run, config, SLURM.name, job, submission)
    finally:
        run.close()
    if args.json:
        out(json.dumps({**profile.to_json(), "run_dir": str(run.path), "job_id": submission.job_id}, indent=2))
    else:
        out(profile.text())
        out(f"gym-launch: submitted judge job {uuid} for run {source_dir.name} as job {submission.job_id}")
        out(f"gym-launch: run directory {run.path}")
    return EXIT_OK
