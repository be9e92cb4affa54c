"""`gym-launch submit`: render the job, write it into a new run directory, hand it to the scheduler.

`gym-launch submit` validates the spec and renders once (every problem reported before anything
exists), then execs ``python -m agent.submit`` with the same arguments; ``main`` is that entry.
It creates ``OUTPUT/cluster/UUID`` (refusing a used UUID), writes ``spec.json`` (every replica's
agent loads it, so all of them run the same fingerprint), the rendered job (``job.sbatch``,
``job.beaker.yaml``) and, once the scheduler took it, ``submission.json`` (backend, job id,
the job file, the command). ``--dry-run`` prints what would be submitted and creates nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from launch.render import Rendered, RenderRequest, render
from launch.spec.config import RunConfig
from launch.spec.console import quiet_broken_pipe
from launch.spec.errors import SpecError, UsageError
from launch.spec.load import load_spec, spec_differences, spec_record
from launch.spec.plan import plan as make_plan
from schemas import RunDir, RunDirError, Writer, WriterKind, names

EXIT_OK, EXIT_USAGE = 0, 2
SBATCH_TIMEOUT_S = 120


class SubmitError(Exception):
    """The scheduler refused the job; the message says what it said."""


@dataclass(frozen=True)
class Submitted:
    job_id: str
    command: tuple[str, ...]


def submit_slurm(job_path: Path, run: RunDir, config: RunConfig) -> Submitted:
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
    return Submitted(out.stdout.strip().split(";", 1)[0], command)


def submit_beaker(job_path: Path, run: RunDir, config: RunConfig) -> Submitted:
    from agent.beaker_submit import submit

    return submit(job_path, run, config)


SUBMITTERS: dict[str, Callable[[Path, RunDir, RunConfig], Submitted]] = {
    "slurm": submit_slurm,
    "beaker": submit_beaker,
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gym-launch submit")
    p.add_argument("spec")
    p.add_argument("--backend", required=True, choices=sorted(SUBMITTERS))
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--uuid")
    p.add_argument("--output-root")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--resume", action="store_true")
    return p


def prepare(args: argparse.Namespace) -> tuple[RenderRequest, Rendered, RunConfig]:
    resolved = load_spec(args.spec, args.overrides)
    config = RunConfig.from_spec(resolved)
    plan = make_plan(config)
    uuid = args.uuid or names.new_uuid()
    root_given = args.output_root or config.output_root
    root = os.path.abspath(root_given)
    request = RenderRequest(
        config=config,
        plan=plan,
        uuid=uuid,
        output_root=root,
        # Every replica loads the run directory's copy: one spec, one fingerprint, overrides applied.
        spec_path=str(Path(root) / "cluster" / uuid / names.SPEC),
        output_root_given=root_given,
        workdir=os.getcwd(),
        resume=bool(getattr(args, "resume", False)),
    )
    return request, render(request, args.backend), config


def submit(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    request, rendered, config = prepare(args)
    job_rel = names.job_file(rendered.file_name)
    where = Path(request.output_root) / "cluster" / request.uuid / job_rel

    def print_instead(why: str) -> None:
        out(f"# gym-launch submit {why}: {args.backend} job for run {request.uuid} (nothing was created)")
        out(f"# it would be written to {where}")
        sys.stdout.write(rendered.text)

    if args.dry_run:
        print_instead("--dry-run")
        return EXIT_OK
    if args.backend == "beaker":
        from agent.beaker_submit import preflight

        try:
            preflight()  # no Beaker client or configuration: say so before anything is created
        except SubmitError as exc:
            # Without a client or configuration, show what would have been submitted (and fail: it was not).
            print_instead("without a Beaker client")
            raise SubmitError(f"{exc}; the spec was printed instead of submitted") from None
    run = RunDir.create(request.output_root, request.uuid, mode=config.dir_mode)
    recorded = run.read_json(names.SPEC)
    if recorded is not None and not request.resume:
        raise UsageError(f"run directory {run.path} already holds a run; pick a new --uuid (or --resume it)")
    if recorded is not None and recorded.get("fingerprint") != config.fingerprint:
        keys = spec_differences(recorded.get("spec") or {}, spec_record(config.spec, "")["spec"])
        raise UsageError(
            f"--resume: the spec differs from the one run {request.uuid} was started with "
            f"(keys: {', '.join(keys) or '(spelling only)'}); resume with {run.path / names.SPEC} or restore them"
        )
    writer = Writer(config.fingerprint, None, "launcher", kind=WriterKind.LAUNCHER)
    if recorded is None:
        run.write_artifact(names.SPEC, "spec", writer, spec_record(config.spec, str(args.spec)))
    run.write_bytes(job_rel, rendered.text.encode("utf-8"))
    submitted = SUBMITTERS[args.backend](run.path / job_rel, run, config)
    run.write_artifact(
        names.SUBMISSION,
        "submission",
        writer,
        {
            "backend": args.backend,
            "job_id": submitted.job_id,
            "job_file": job_rel,
            "command": list(submitted.command),
            "submitted_at": time.time(),
        },
    )
    out(f"gym-launch: submitted run {request.uuid} to {args.backend} as job {submitted.job_id}")
    out(f"gym-launch: run directory {run.path}")
    return EXIT_OK


@quiet_broken_pipe
def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return submit(args, lambda line: print(line, flush=True))
    except (UsageError, SpecError, SubmitError, RunDirError) as exc:
        print(f"gym-launch: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    # Run the importable module's main, not this __main__ copy: agent.beaker_submit raises
    # agent.submit.SubmitError, which must be the class main() catches.
    from agent.submit import main as module_main

    sys.exit(module_main())
