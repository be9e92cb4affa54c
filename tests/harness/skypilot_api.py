"""SkyPilot on this machine: its API server and a cloud cannot exist here, so its health answer and
the calls a job queue takes (``sky.jobs.queue_v2`` / ``sky.queue``, then ``sky.get``) are stood in
for, answering with SkyPilot's own record objects (its ``responses`` models and status enums)."""

from __future__ import annotations

from typing import Any

import pytest


def healthy_server(monkeypatch: pytest.MonkeyPatch) -> None:
    from sky.server import common

    class Healthy:
        status = common.ApiServerStatus.HEALTHY

    monkeypatch.setattr(common, "get_api_server_status", lambda *_a, **_k: Healthy())


def managed_job(job_id: int, status: str, **fields: Any) -> Any:
    """A managed job's record as the API server returns it (ManagedJobRecord, ManagedJobStatus)."""
    from sky.jobs.state import ManagedJobStatus
    from sky.schemas.api.responses import ManagedJobRecord

    return ManagedJobRecord(job_id=job_id, status=ManagedJobStatus(status), **fields)


def cluster_job(job_id: int, status: str) -> Any:
    """A job of a cluster's queue as the API server returns it (ClusterJobRecord, JobStatus)."""
    from sky.schemas.api.responses import ClusterJobRecord
    from sky.skylet.job_lib import JobStatus

    return ClusterJobRecord(
        job_id=job_id,
        job_name="gym",
        username="me",
        user_hash="abc",
        submitted_at=0.0,
        resources="3x[H100:8]",
        status=JobStatus(status),
        log_path="~/sky_logs",
    )


def answer_queues(
    monkeypatch: pytest.MonkeyPatch, managed: list[Any], clusters: dict[str, list[Any]], asked: list[Any]
) -> None:
    """The API server answers the managed-job queue with `managed` and each cluster's queue with its list."""
    import sky

    healthy_server(monkeypatch)

    def queue_v2(refresh: bool, job_ids: list[int] | None = None, **_kw: Any) -> str:
        asked.append(("jobs.queue_v2", refresh, job_ids))
        return "request-jobs"

    def queue(cluster_name: str, **_kw: Any) -> str:
        asked.append(("queue", cluster_name))
        return f"request-{cluster_name}"

    def get(request: str) -> Any:
        if request == "request-jobs":
            return (managed, len(managed), {}, len(managed))
        return clusters[request.removeprefix("request-")]

    monkeypatch.setattr(sky.jobs, "queue_v2", queue_v2)
    monkeypatch.setattr(sky, "queue", queue)
    monkeypatch.setattr(sky, "get", get)
