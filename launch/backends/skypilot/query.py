"""The read-only questions to SkyPilot (its Python API, through the configured API server) and the
reading of its answers: a job's record, a managed job (``N``) or a job on a cluster (``CLUSTER/N``,
``managed = false``), for `gym-launch status` and for the audit (why the job ended). Every question
is bounded in time and never raises (launch/backends/asking.py). Nothing here starts an API server:
the configured one's health is asked first, as `gym-launch submit` does.
"""

from __future__ import annotations

from typing import Any

from launch.backends.answers import Answer, SchedulerView, asked_ending
from launch.backends.asking import Asked, bounded, then
from schemas import FailureKind

__all__ = ["INSTALL_HINT", "ending", "ending_kind", "job", "ready", "view", "would_ask"]

INSTALL_HINT = "pip install 'gym-agent[skypilot]'"
# SkyPilot's job statuses (ManagedJobStatus / JobStatus values) that are an ending of SkyPilot's.
CANCELLED = ("CANCELLED", "CANCELLING")
RECOVERING = "RECOVERING"  # a managed job whose cluster was preempted or failed


def would_ask(job_id: str) -> str:
    cluster, _, number = job_id.rpartition("/")
    if cluster:
        return f"SkyPilot for job {number} of cluster {cluster} (sky.queue; `sky queue {cluster}`)"
    return f"SkyPilot for managed job {job_id} (sky.jobs.queue_v2; `sky jobs queue {job_id}`)"


def ready() -> Asked[Any]:
    """SkyPilot's module, once its configured API server answers healthy; or why not. Asks the
    server's health endpoint only: a client call would start a local server, which is the user's to start."""
    try:
        import sky
        from sky.server import common
    except ImportError:
        return Asked(None, f"SkyPilot is not installed ({INSTALL_HINT})")
    url = common.get_server_url()
    health = bounded(lambda: common.get_api_server_status(url).status, "SkyPilot's API server")
    if health.value is None:
        return Asked(None, health.why_not)
    if health.value != common.ApiServerStatus.HEALTHY:
        return Asked(None, f"no SkyPilot API server answers at {url} ({health.value.value})")
    return Asked(sky)


def field(record: Any, name: str) -> Any:
    """A field of a SkyPilot record: its typed response objects, or the dicts of older servers."""
    return record.get(name) if isinstance(record, dict) else getattr(record, name, None)


def job(sky: Any, job_id: str) -> Asked[Any]:
    """The record SkyPilot keeps of ``job_id``: a managed job (``N``) or a job on a cluster
    (``CLUSTER/N``, ``sky.launch``), or why there is none."""
    cluster, _, number_text = job_id.rpartition("/")
    if not number_text.isdigit():
        return Asked(None, f"{job_id!r} is not a SkyPilot job id")
    number = int(number_text)

    def question() -> Any:
        if cluster:
            records = sky.get(sky.queue(cluster))
        else:
            answer = sky.get(sky.jobs.queue_v2(refresh=False, job_ids=[number]))
            records = answer[0] if isinstance(answer, tuple) else answer
        return next((r for r in records if field(r, "job_id") == number), None)

    found = bounded(question, "SkyPilot")
    if found.why_not is None and found.value is None:
        return Asked(None, f"SkyPilot does not know job {job_id}")
    return found


def status_name(record: Any) -> str | None:
    """The record's status as SkyPilot spells it (ManagedJobStatus or JobStatus value)."""
    status = field(record, "status")
    return None if status is None else str(getattr(status, "value", status))


def _terminal(record: Any) -> bool:
    status = field(record, "status")
    is_terminal = getattr(status, "is_terminal", None)
    return bool(is_terminal()) if callable(is_terminal) else False


def _reason(record: Any) -> Any:
    return field(record, "failure_reason") or field(record, "details")


def ending_kind(record: Any) -> FailureKind | None:
    """The ending a job record names: cancelled by its user, or being recovered after its cluster
    was preempted (or lost: then a node failure)."""
    status = status_name(record)
    if status in CANCELLED:
        return FailureKind.CANCELLED
    if status == RECOVERING:
        words = " ".join(str(field(record, k) or "") for k in ("failure_reason", "details")).lower()
        return FailureKind.PREEMPTED if "preempt" in words else FailureKind.NODE_FAILURE
    return None


def ending(job_id: str | None) -> Answer:
    """SkyPilot's account of how the run's job ended (submission.json names it: N or CLUSTER/N)."""
    if not job_id:
        return Answer(None)
    sky = ready()
    if sky.value is None:
        return Answer(None, f"SkyPilot was not asked ({would_ask(job_id)}): {sky.why_not}")
    found = job(sky.value, job_id)
    if found.value is None:
        return Answer(None, f"SkyPilot was asked about job {job_id}: {found.why_not}")
    record = found.value
    status = status_name(record) or "an unknown state"
    kind = ending_kind(record)
    if kind is None:
        return Answer(None, f"SkyPilot says job {job_id} is {status}")
    words = f"job {job_id} {status}"
    reason = _reason(record)
    if reason:
        words += f" ({reason})"
    return Answer(asked_ending(kind, job_id, None, words, "SkyPilot job queue"))


def view(job_id: str, replicas: int | None = None) -> SchedulerView:
    """`gym-launch status`'s view of the job: the managed job's record (status, recoveries, failure
    reason), or the cluster job's (``replicas``: unused, the record is the whole task's)."""
    asks = would_ask(job_id)
    found = then(ready(), lambda sky: job(sky, job_id))
    if found.value is None:
        return SchedulerView("skypilot", job_id, error=found.why_not, asks=asks)
    record = found.value
    reason = _reason(record)
    kind = ending_kind(record)
    if kind is not None:
        reason = f"{reason} ({kind})" if reason else str(kind)
    infra = field(record, "infra") or field(record, "cluster_resources")
    recoveries = field(record, "recovery_count")
    return SchedulerView(
        "skypilot",
        job_id,
        state=status_name(record),
        reason=reason or None,
        nodes=field(record, "node_names") or (str(infra) if infra else None),
        restarts=int(recoveries) if isinstance(recoveries, int) else None,
        asks=asks,
        ended=_terminal(record),
    )
