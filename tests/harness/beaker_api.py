"""Beaker on this machine: the user's client configuration, and the calls of Beaker's API a test
replaces (beaker-py's ``JobClient.get``, ``WorkloadClient.get``, ``JobClient.list``; Beaker itself cannot be
reached from here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def write_beaker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, token: str = "tok-test") -> Path:
    """A Beaker client configuration with a fake `token`, as Beaker's CLI writes it; every BEAKER_*
    variable of this environment unset, $BEAKER_CONFIG pointing at it."""
    path = tmp_path / "home" / ".beaker" / "config.yml"
    path.parent.mkdir(parents=True)
    path.write_text(f"user_token: {token}\nagent_address: https://beaker.invalid\ndefault_org: team\n")
    for k in [k for k in os.environ if k.startswith("BEAKER_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("BEAKER_CONFIG", str(path))
    return path


def answer_jobs(monkeypatch: pytest.MonkeyPatch, code: str, why: str, asked: list[str]) -> None:
    """Beaker answers every job's status with cancelation code `code` (a CancelationCode name)."""
    from beaker import beaker_pb2 as pb2
    from beaker._job import JobClient

    def get(self: JobClient, job_id: str) -> pb2.Job:  # the one mock: Beaker's API
        asked.append(job_id)
        status = pb2.JobStatus(canceled_code=pb2.CancelationCode.Value(code), canceled_for=why)
        return pb2.Job(id=job_id, status=status)

    monkeypatch.setattr(JobClient, "get", get)


def answer_experiment(
    monkeypatch: pytest.MonkeyPatch,
    experiment: str,
    workload_status: str,
    jobs: list[tuple[str, str, str, str]],
    asked: list[str],
) -> None:
    """Beaker answers `experiment` (a workload of one task, `workload_status` a WorkloadStatus name)
    with `jobs` (id, WorkloadStatus name, node, CancelationCode name or "") for its task, newest first:
    the calls `gym-launch status` makes (beaker-py's WorkloadClient.get and JobClient.list)."""
    from beaker import beaker_pb2 as pb2
    from beaker._job import JobClient
    from beaker._workload import WorkloadClient

    task = pb2.Task(id="01TASK", experiment_id=experiment)

    def get(self: WorkloadClient, workload: str) -> pb2.Workload:
        asked.append(f"workload {workload}")
        status = pb2.WorkloadStatus.Value(workload_status)
        return pb2.Workload(experiment=pb2.Experiment(id=experiment, tasks=[task]), status=status)

    def listed(self: JobClient, *, task: pb2.Task | None = None, **_kw: object) -> list[pb2.Job]:
        asked.append(f"jobs of task {task.id if task else None}")
        return [
            pb2.Job(
                id=job_id,
                task_id="01TASK",
                status=pb2.JobStatus(
                    status=pb2.WorkloadStatus.Value(state),
                    canceled_code=pb2.CancelationCode.Value(code) if code else 0,
                ),
                assignment_details=pb2.AssignmentDetails(node_id=node),
            )
            for job_id, state, node, code in jobs
        ]

    monkeypatch.setattr(WorkloadClient, "get", get)
    monkeypatch.setattr(JobClient, "list", listed)
