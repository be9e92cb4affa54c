"""`gym-launch regrade OUTPUT/cluster/UUID`: a judge-only job that grades a finished run's saved
answers again, submitted to Slurm (seed 003). The side effects of ``launch.regrade``: reading the
run's spec.json, the partition's MaxTime (`scontrol show partition`), the reader placement from
the environment, creating the judge job's own run directory beside the run's (same output root),
writing its spec.json, job.sbatch, regrade.json (the record naming the source run) and
submission.json, and running sbatch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from agent.submit import SubmitError, submit_slurm
from launch import regrade as rg
from launch.cli import add_regrade_arguments
from launch.render import RenderRequest, render
from launch.spec.config import RunConfig
from launch.spec.console import quiet_broken_pipe
from launch.spec.errors import SpecError, UsageError
from launch.spec.load import load_spec, resolved_from_dict, spec_record
from launch.spec.plan import plan as make_plan
from schemas import RunDir, RunDirError, Writer, WriterKind, names
from schemas.vocab import LauncherEnv

EXIT_OK, EXIT_USAGE = 0, 2
SCONTROL_TIMEOUT_S = 30


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gym-launch regrade")
    add_regrade_arguments(p)
    return p


def partition_max_time(partition: str | None) -> str | None:
    """MaxTime of ``partition`` (None: the default partition) from `scontrol show partition`;
    None when scontrol is missing or says nothing about it."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return None
    try:
        out = subprocess.run(
            [scontrol, "show", "partition", "--oneliner", *([partition] if partition else [])],
            capture_output=True,
            text=True,
            timeout=SCONTROL_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return None
    if out.returncode != 0:
        return None  # no cluster answered, or no such partition: sbatch will say which
    for line in out.stdout.splitlines():
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if (fields.get("PartitionName") != partition) if partition else (fields.get("Default") != "YES"):
            continue
        return fields.get("MaxTime")
    return None


def load_source(run_dir: str) -> tuple[Path, RunConfig]:
    path = Path(run_dir).absolute()
    spec = path / names.SPEC
    if not spec.is_file():
        raise UsageError(f"{path}: no {names.SPEC}: not a run directory (give OUTPUT/cluster/UUID)")
    return path, RunConfig.from_spec(load_spec(spec))


def regrade(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    source_dir, source = load_source(args.run_dir)
    if not args.command.strip():
        raise UsageError("--command is empty; give the shell command that grades the saved answers")
    placement = rg.Placement(args.judge_partition, args.judge_qos, os.environ.get(LauncherEnv.READER_SRUN))
    _, partition, _ = rg.target_partition(source, placement)
    profile = rg.derive_profile(source, placement, partition_max_time(partition))
    data = rg.judge_job_spec(source, profile, args.command)
    resolved = resolved_from_dict(data, str(source_dir))
    config = RunConfig.from_spec(resolved)
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
    rendered = render(request, "slurm")
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
    run = RunDir.create(root, uuid, mode=config.dir_mode)
    if run.read_json(names.SPEC) is not None:
        raise UsageError(f"run directory {run.path} already holds a run; pick a new --uuid")
    writer = Writer(config.fingerprint, None, "launcher", kind=WriterKind.LAUNCHER)
    run.write_artifact(names.SPEC, "spec", writer, spec_record(resolved, str(source_dir / names.SPEC)))
    run.write_artifact(names.REGRADE, "regrade", writer, record)
    job_rel = names.job_file(rendered.file_name)
    run.write_bytes(job_rel, rendered.text.encode("utf-8"))
    submitted = submit_slurm(run.path / job_rel, run, config)
    run.write_artifact(
        names.SUBMISSION,
        "submission",
        writer,
        {"backend": "slurm", "job_id": submitted.job_id, "job_file": job_rel, "command": list(submitted.command)},
    )
    if args.json:
        out(json.dumps({**profile.to_json(), "run_dir": str(run.path), "job_id": submitted.job_id}, indent=2))
    else:
        out(profile.text())
        out(f"gym-launch: submitted judge job {uuid} for run {source_dir.name} as job {submitted.job_id}")
        out(f"gym-launch: run directory {run.path}")
    return EXIT_OK


@quiet_broken_pipe
def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return regrade(args, lambda line: print(line, flush=True))
    except (UsageError, SpecError, SubmitError, RunDirError) as exc:
        print(f"gym-launch: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    from agent.regrade import main as module_main

    sys.exit(module_main())
