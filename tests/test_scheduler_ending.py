"""The scheduler's ending as the first cause: parsing its words (lines measured on Slurm 22.05)
and the rule that a rank's own earlier failure still wins. The real endings on the local Slurm
cluster are in tests/test_slurm_endings.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit.api import audit_run
from launch.backends.slurm.ending import parse_slurm_output
from schemas import FailureKind, names
from tests.harness import assert_artifacts_valid
from tests.harness.rundirs import T0, RunBuilder

TIME_LIMIT = """start
slurmstepd-n1: error: *** STEP 1.0 ON n1 CANCELLED AT 2026-12-01T10:59:58 DUE TO TIME LIMIT ***
srun: Job step aborted: Waiting up to 17 seconds for job step to finish.
slurmstepd-n1: error: *** JOB 1 ON n1 CANCELLED AT 2026-12-01T10:59:58 DUE TO TIME LIMIT ***
srun: error: n3: task 2: Exited with exit code 143
"""
CANCEL = """srun: Job step aborted: Waiting up to 17 seconds for job step to finish.
slurmstepd-n1: error: *** JOB 2 ON n1 CANCELLED AT 2026-12-01T10:58:40 ***
srun: forcing job termination
slurmstepd-n1: error: *** STEP 2.0 ON n1 CANCELLED AT 2026-12-01T10:58:40 ***
"""
_DETAILS = "DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"
NODE_FAILURE = f"""srun: error: Node failure on n2
srun: Job step aborted: Waiting up to 17 seconds for job step to finish.
slurmstepd-n1: error: *** JOB 3 ON n1 CANCELLED AT 2026-12-01T11:00:35 {_DETAILS}
slurmstepd-n1: error: *** STEP 3.0 ON n1 CANCELLED AT 2026-12-01T11:00:35 {_DETAILS}
"""
PREEMPTED = "slurmstepd-n2: error: *** JOB 4 ON n2 CANCELLED AT 2026-12-01T12:00:00 DUE TO PREEMPTION ***\n"
# --kill-on-bad-exit ends the step when a task fails: no JOB line, the task is the cause.
BAD_EXIT = """srun: error: n2: task 1: Exited with exit code 1
slurmstepd-n1: error: *** STEP 5.0 ON n1 CANCELLED AT 2026-12-01T12:10:00 ***
"""


@pytest.mark.parametrize(
    ("text", "kind", "job", "node"),
    [
        (TIME_LIMIT, FailureKind.TIME_LIMIT, "1", None),
        (CANCEL, FailureKind.CANCELLED, "2", None),
        (NODE_FAILURE, FailureKind.NODE_FAILURE, "3", "n2"),
        (PREEMPTED, FailureKind.PREEMPTED, "4", None),
    ],
)
def test_the_job_line_names_the_ending(text: str, kind: FailureKind, job: str, node: str | None) -> None:
    ending = parse_slurm_output(text.splitlines(), "job-slurm-x.out")
    assert ending is not None
    assert (ending.kind, ending.job_id, ending.node) == (kind, job, node)
    assert ending.words.startswith("*** JOB") and ending.words.endswith("***")


def test_a_step_line_alone_is_no_ending() -> None:
    assert parse_slurm_output(BAD_EXIT.splitlines(), "job-slurm-5.out") is None


def _scheduler_ended(root: Path, output: str, job: str, *, crash_before: float | None = None) -> Path:
    """Every rank signalled by slurmstepd during the driver (or, with crash_before, rank 1's
    driver crashed that many seconds before the signals)."""
    b = RunBuilder(root)
    b.startup()
    t = b.phase_start(0, "driver") + 30.0
    b.run.write_artifact(
        names.SUBMISSION,
        b.writer(None, "launcher"),
        {"backend": "slurm", "job_id": job, "job_file": "job.sbatch", "command": ["sbatch"], "submitted_at": T0},
    )
    (b.path / names.slurm_output(job)).write_text(output)
    for r in b.ranks:
        if crash_before is not None and r == 1:
            b.failure(1, "driver_exit", "driver exited with code 1", "driver", t - crash_before, exit_code=1)
        else:
            b.failure(
                r,
                "signal",
                f"received SIGTERM from pid {4000 + r} (slurmstepd)",
                "driver",
                t + 0.05 * r,
                signal="SIGTERM",
                sender={"pid": 4000 + r, "uid": 0, "name": "slurmstepd"},
            )
        b.phases(r, "driver", state="FAILED", last="failed", detail="stopped")
        b.cleanup(r, "failure")
    return b.path


@pytest.mark.parametrize(
    ("text", "job", "kind", "rank"),
    [
        (TIME_LIMIT, "1", "time_limit", 0),
        (CANCEL, "2", "cancelled", 0),
        (NODE_FAILURE, "3", "node_failure", 2),
    ],
)
def test_the_audit_names_the_scheduler_not_a_ranks_sigterm(
    tmp_path: Path, text: str, job: str, kind: str, rank: int
) -> None:
    # The builder's hostnames are gpu-node-R: the scheduler's host names are mapped onto them.
    run = _scheduler_ended(tmp_path, text.replace(" n1", " gpu-node-0").replace(" n2", " gpu-node-2"), job)
    assert_artifacts_valid(run)
    result = audit_run(run)
    fc = result.first_cause
    assert fc is not None and fc.kind == kind, fc
    assert fc.scheduler == "slurm" and fc.rank == rank
    assert f"slurm ended job {job}" in fc.cause and "*** JOB" in fc.cause
    assert "every rank's SIGTERM came from slurmstepd" in fc.cause
    assert fc.file == names.slurm_output(job)
    assert [c.kind for c in result.cascade] == ["signal"] * 3 and not result.other_roots
    doc = json.loads(json.dumps(result.to_json()))
    assert doc["first_cause"]["kind"] == kind and doc["first_cause"]["scheduler"] == "slurm"
    from audit._report_text import render

    text_report = render(result)
    lines = text_report.splitlines()
    first = lines[lines.index("First cause:") + 1]
    assert first.strip().startswith(f"slurm (the scheduler), {kind}"), text_report[:1500]


def test_a_rank_that_failed_before_the_scheduler_stays_the_first_cause(tmp_path: Path) -> None:
    run = _scheduler_ended(tmp_path, CANCEL, "2", crash_before=20.0)
    fc = audit_run(run).first_cause
    assert fc is not None and (fc.kind, fc.rank, fc.scheduler) == ("driver_exit", 1, None), fc


def test_a_failure_after_the_signals_is_their_consequence(tmp_path: Path) -> None:
    # A driver that exits 1 on SIGTERM is recorded a moment after the scheduler's signals.
    run = _scheduler_ended(tmp_path, TIME_LIMIT, "1", crash_before=-0.5)
    fc = audit_run(run).first_cause
    assert fc is not None and fc.kind == "time_limit", fc


def test_without_the_jobs_output_the_signal_stays(tmp_path: Path) -> None:
    run = _scheduler_ended(tmp_path, "no ending here\n", "9")
    fc = audit_run(run).first_cause
    assert fc is not None and fc.kind == "signal" and fc.scheduler is None, fc


def test_each_start_of_a_requeued_job_has_its_own_ending() -> None:
    # A preempted job is requeued and appends its next start to the same output.
    marker = names.SLURM_START_MARKER
    text = f"{marker} 4 start 0 on n1\nrunning\n{PREEMPTED}{marker} 4 start 1 on n1\nrunning again\n"
    lines = text.splitlines()
    first = parse_slurm_output(lines, "job-slurm-4.out", restart=0)
    assert first is not None and first.kind == FailureKind.PREEMPTED and first.line == 3, first
    assert parse_slurm_output(lines, "job-slurm-4.out", restart=1) is None
    assert parse_slurm_output(lines, "job-slurm-4.out") is None  # unknown restart: the last start
    assert parse_slurm_output(lines, "job-slurm-4.out", restart=7) is None  # not in the part read
